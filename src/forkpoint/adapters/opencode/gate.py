"""OpenCode's Chat Completions profile for the one chat gate (pure data; the manifest is envelope.py's).

First request: ``[system, <the rebuilt session>, {"role": "user", "content": NONCE}]`` and nothing after the
nonce. Later requests: the same, followed by the live continuation (kept). The profile says: exactly one leading
``system`` message whose date-masked hash must equal the manifest's when it has one (and stay the same across
requests); the nonce message is ``{"role": "user", "content": NONCE}`` (with a boundary prompt, its text becomes
the prompt); the manifest's model and tool list are pinned (a ``question`` tool means the session lost its
``permission``); OpenCode's step-limit message and any ``[Tool execution was interrupted]`` result are refused;
tool-call arguments are compared parsed (OpenCode re-serialises them).

A 1.x release before 1.15 sends its line's older form (``envelope.SENDERS``: 1.2's measured on 1.2.6, 1.3's on
1.3.2 and 1.14.41; 1.15.3 and 1.15.4 send the verified versions'): the gate follows the release that sends the
request, which a calibration names (``forkpoint.runtimes.trial``).

Title-generation requests (no ``tools``) are auxiliary: forwarded unchanged, not a step, unless they carry the
nonce (OpenCode sends none on a resumed session).
"""

from __future__ import annotations

import dataclasses

from forkpoint.adapters.opencode.envelope import (
    INTERRUPTED,
    PROFILES,
    SENDER_1_2,
    SENDERS,
    STEP_LIMIT_TEXT,
    EnvelopeProfile,
    masked_system_sha256,
    project_request_message,
)
from forkpoint.bridge.protocols.openai_chat import ChatProfile, Forbidden
from forkpoint.core.model import JsonObject


def nonce_message(text: str) -> JsonObject:
    """What ``opencode run --session <id> NONCE`` appends (the nonce is one argv word, sent as a string)."""
    return {"role": "user", "content": text}


PROFILE = ChatProfile(
    agent="OpenCode",
    project=lambda message, _index: project_request_message(message),
    system="required",
    system_hash=lambda content: masked_system_sha256(str(content)),
    nonce_message=nonce_message,
    forbidden=(
        Forbidden("assistant", STEP_LIMIT_TEXT, "OpenCode's step-limit message (agent.build.steps must stay unset)",
                  prefix=True),
        Forbidden("tool", INTERRUPTED, "an interrupted tool result"),
    ),
    helpers_without_tools=True,
    verified=frozenset(profile.profile for profile in PROFILES.values()),
)


def _sender(sender: EnvelopeProfile) -> ChatProfile:
    """The profile of an older sending release: its nonce message carries its suffix (1.2's ends with a newline)."""
    return dataclasses.replace(PROFILE, nonce_message=lambda text: nonce_message(text + sender.nonce_suffix),
                               verified=frozenset({sender.profile}))


#: the older senders' profiles (envelope.SENDERS), by their envelope profile name
SENDER_PROFILES = {sender.profile: _sender(sender) for _, sender in SENDERS if sender is not None}
PROFILE_1_2 = SENDER_PROFILES[SENDER_1_2.profile]


def profile_for(expected_profile: str) -> ChatProfile:
    return SENDER_PROFILES.get(expected_profile, PROFILE)
