// forkpoint's Node runner for Pi (@earendil-works/pi-coding-agent 0.83.0 and 1.6.0), run with the runtime's own
// Node 22.
//
//   node runner.mjs tool      < {"runtime_root", "cwd", "tools", "call": {"id", "name", "arguments"}}
//       Re-runs one historical call with Pi's OWN tool (createReadTool/createBashTool/createEditTool/
//       createWriteTool/createGrepTool/createFindTool/createLsTool), exactly as Pi's agent loop does: a name
//       outside the enabled ``tools`` gets the loop's own "Tool <name> not found" error result; otherwise
//       prepareArguments, validateToolArguments, execute; a thrown error becomes
//       {content:[{type:"text",text:message}], details:{}, isError:true}; with ``flagged_errors`` (Pi 1.x's loop) a
//       returned result whose isError is true is an error too. Prints {"started":true} (flushed) right
//       before execute, so forkpoint knows whether an effect may have happened, then the reply as the last line.
//   node runner.mjs continue  < {"runtime_root", "cwd", "session_file", "provider", "model", "prompt", "max_turns",
//                                "events_path"}
//       Opens the rebuilt v3 session with the Pi SDK and continues it: no prompt -> session.agent.continue() (no
//       user message at all); a prompt -> exactly one session.prompt(). Every agent event is appended to
//       events_path as JSONL. Stops after max_turns turns (a shouldStopAfterTurn hook on the agent loop). Prints
//       {"turns", "agent_status", "error"} as the last stdout line. ``tools`` (optional): the recorded enabled
//       tool names, passed to createAgentSession like Pi's own --tools flag.
//
// Every reply is written with a completion callback before process.exit(): Node writes to a full pipe
// asynchronously, and exiting at once cut replies over 64 KiB.
//
// The agent dir (models.json, settings.json, auth) comes from PI_CODING_AGENT_DIR, set by forkpoint.
import { readFileSync, appendFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const TOOL_FACTORIES = {
  read: "createReadTool", bash: "createBashTool", edit: "createEditTool", write: "createWriteTool",
  grep: "createGrepTool", find: "createFindTool", ls: "createLsTool",
};

/** Write all of ``text`` to stdout and resolve once Node handed it to the pipe (a full pipe drains later). */
function emit(text) {
  return new Promise((resolve) => {
    process.stdout.write(text, () => resolve());
  });
}

async function importPackage(root, name) {
  const dir = join(root, "node_modules", ...name.split("/"));
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  if (manifest.name !== name) throw new Error(`${dir} holds ${manifest.name}, expected ${name}`);
  const exported = manifest.exports?.["."];
  const entry = typeof exported === "string" ? exported : exported?.import ?? exported?.default ?? manifest.main;
  if (typeof entry !== "string") throw new Error(`${name} declares no ESM entry`);
  return { module: await import(pathToFileURL(join(dir, entry)).href), version: manifest.version };
}

function readStdin() {
  return JSON.parse(readFileSync(0, "utf8"));
}

function errorResult(error) {
  return { content: [{ type: "text", text: error instanceof Error ? error.message : String(error) }], details: {} };
}

async function runTool(request) {
  const { module: pi } = await importPackage(request.runtime_root, "@earendil-works/pi-coding-agent");
  const { module: ai } = await importPackage(request.runtime_root, "@earendil-works/pi-ai");
  const call = request.call;
  const enabled = Array.isArray(request.tools) ? request.tools : Object.keys(TOOL_FACTORIES).slice(0, 4);
  if (!enabled.includes(call.name)) {
    // agent-loop.js prepareToolCall: `currentContext.tools?.find((t) => t.name === toolCall.name)` failed
    const out = { content: [{ type: "text", text: `Tool ${call.name} not found` }], details: {}, isError: true,
                  duration_ms: 0 };
    await emit(JSON.stringify(out) + "\n");
    return;
  }
  const factory = TOOL_FACTORIES[call.name];
  if (!factory) {
    // never reached through forkpoint (the parser refuses such recordings); kept as a second lock
    await emit(JSON.stringify({ refused: `Pi replay profile does not support tool "${call.name}"` }) + "\n");
    process.exitCode = 3;
    return;
  }
  const tool = pi[factory](request.cwd);
  const started = Date.now();
  let result;
  let isError = false;
  try {
    const prepared = tool.prepareArguments ? tool.prepareArguments(call.arguments) : call.arguments;
    const args = ai.validateToolArguments(tool, { ...call, arguments: prepared });
    await emit(JSON.stringify({ started: true }) + "\n");
    result = await tool.execute(call.id, args, undefined, undefined);
    // Pi 1.x's executePreparedToolCall: `isError: result.isError === true`; 0.83.0's: always false
    isError = request.flagged_errors === true && result?.isError === true;
  } catch (error) {
    result = errorResult(error);
    isError = true;
  }
  const out = { content: result.content ?? [], details: result.details, isError, duration_ms: Date.now() - started };
  await emit(JSON.stringify(out) + "\n");
}

async function runContinue(request) {
  const { module: pi, version } = await importPackage(request.runtime_root, "@earendil-works/pi-coding-agent");
  if (version !== request.expected_version) throw new Error(`Pi package is ${version}, expected ${request.expected_version}`);
  const modelRuntime = await pi.ModelRuntime.create();
  const model = modelRuntime.getModel(request.provider, request.model);
  if (!model) throw new Error(`model ${request.provider}/${request.model} is not configured in models.json`);
  const sessionManager = pi.SessionManager.open(request.session_file);
  const options = { cwd: request.cwd, model, modelRuntime, sessionManager };
  if (Array.isArray(request.tools)) options.tools = request.tools;
  const { session } = await pi.createAgentSession(options);
  let turns = 0;
  let stopped = false;
  let failure = null;
  const agent = session.agent;
  const loopConfig = agent.createLoopConfig.bind(agent);
  agent.createLoopConfig = (options) => ({
    ...loopConfig(options),
    shouldStopAfterTurn: async () => {
      stopped = request.max_turns !== null && turns >= request.max_turns;
      return stopped;
    },
  });
  session.subscribe((event) => {
    if (event.type === "turn_end") {
      turns += 1;
      const reason = event.message?.stopReason;
      if (reason === "error" || reason === "aborted") failure ??= event.message?.errorMessage ?? `stopReason ${reason}`;
    }
    appendFileSync(request.events_path, JSON.stringify(event) + "\n");
  });
  if (request.prompt === null) {
    await agent.continue();
  } else {
    await session.prompt(request.prompt, { expandPromptTemplates: false, source: "rpc" });
  }
  const status = failure ? "failed" : stopped ? "max_steps" : "completed";
  await emit(JSON.stringify({ turns, agent_status: status, error: failure }) + "\n");
  session.dispose?.();
}

const mode = process.argv[2];
try {
  if (mode === "tool") await runTool(readStdin());
  else if (mode === "continue") await runContinue(readStdin());
  else throw new Error(`unknown runner mode ${mode}`);
} catch (error) {
  await emit(JSON.stringify({ fatal: error instanceof Error ? error.message : String(error) }) + "\n");
  process.exitCode = 2;
}
process.exit();
