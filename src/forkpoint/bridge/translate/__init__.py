"""Pure protocol translation for the bridge: Anthropic Messages / OpenAI Responses <-> Chat Completions, usage,
retry policy and sampling pins. No I/O here: the bridge's upstream shells feed these dicts and bytes."""
