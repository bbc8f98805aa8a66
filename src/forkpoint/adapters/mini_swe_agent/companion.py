"""forkpoint's companion runner for mini-swe-agent: runs INSIDE the agent's venv, never inside forkpoint.

Started as ``<venv>/bin/python -I companion.py <socket path>``; stdlib + the installed ``minisweagent`` only (it
must not import forkpoint). It connects to forkpoint's Unix socket and answers JSON lines, one reply per request
(protocol ``forkpoint.mini-swe-agent-runner/v1``, documented in docs/adapters/mini-swe-agent.md):

* ``{"op": "open", "source": <trajectory.json>, "workspace": <dir>, "version": "2.4.6"}``: load the recording,
  check the installed version, build the agent, model and environment from ``info.config`` (environment ``cwd`` =
  the workspace; a container environment is replayed by LocalEnvironment there, a recorded model class that
  cannot be built here by its litellm sibling, both listed in ``degradations``). Reply ``{"ok": true, "pid",
  "mini_version", "degradations"}``; a recording that cannot be loaded replies ``{"ok": false, "error",
  "refusal": "trajectory" | "unsupported"}``.
* ``{"op": "execute", "action": {"command": ..., ["tool_call_id": ...]}}``: run one historical action with the
  package's own environment and format the result with its own observation formatter (1.x: the agent's
  ``action_observation_template`` / ``timeout_template``; 2.x: ``model.format_observation_messages``). Reply
  ``{"ok": true, "message": <native observation message>, "output": {output, returncode, exception_info},
  "submitted": bool, "duration_ms"}``.
* ``{"op": "continue", "prefix": <rebuilt trajectory>, "output": <continued trajectory>, "api_base", "api_key",
  "prefix_calls", "step_limit", "boundary_prompt"}``: seed ``agent.messages`` with the rebuilt prefix, then step
  the agent the way ``DefaultAgent.run`` does until it exits; the trajectory is saved natively. Reply
  ``{"ok": true, "exit_status", "n_calls", "error"}``.
* ``{"op": "close"}``: reply and exit. A failing request replies ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROTOCOL = "forkpoint.mini-swe-agent-runner/v1"
LOCAL_ENV = "minisweagent.environments.local.LocalEnvironment"
#: container environments whose actions are replayed by LocalEnvironment at the recorded cwd (same subshell per
#: action, same output dict); only the keys LocalEnvironment takes are kept (the image, docker flags are not)
CONTAINER_ENVS = ("environments.docker.DockerEnvironment",
                  "environments.extra.swerex_docker.SwerexDockerEnvironment",
                  "environments.singularity.SingularityEnvironment",
                  "environments.extra.bubblewrap.BubblewrapEnvironment")
#: replay only formats observations with the model: the same-family litellm class does it when the recorded
#: class cannot be built here (a package or credential it needs at construction is missing)
FALLBACK_MODELS = (("textbased", "minisweagent.models.litellm_textbased_model.LitellmTextbasedModel"),
                   ("response", "minisweagent.models.litellm_response_model.LitellmResponseModel"),
                   ("", "minisweagent.models.litellm_model.LitellmModel"))


class Refusal(Exception):
    """The recording cannot be loaded here; ``kind`` is forkpoint's error category (before any effect)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind
#: keys of the 1.x InteractiveAgentConfig / 2.x InteractiveAgentConfig that a plain agent config rejects
INTERACTIVE_KEYS = ("mode", "whitelist_actions", "confirm_exit")


def _load(path: str) -> Any:
    return importlib.import_module(path)


def _class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(_load(module), name)


class Session:
    """One recording's agent, model and environment, rebuilt from its ``info.config``."""

    def __init__(self, source: dict[str, Any], workspace: str, api: dict[str, Any] | None = None) -> None:
        info = source.get("info") if isinstance(source, dict) else None
        config = info.get("config") if isinstance(info, dict) else None
        if not isinstance(config, dict):
            raise Refusal("trajectory", "the trajectory has no info.config (written before mini-swe-agent 1.10): "
                                        "the agent cannot be rebuilt")
        self.major = int(_load("minisweagent").__version__.split(".")[0])
        self.degradations: list[str] = []
        env_type = str(config.get("environment_type", ""))
        environment = config.get("environment")
        recorded_env: dict[str, Any] = environment if isinstance(environment, dict) else {}
        env_class = _class(LOCAL_ENV)
        if env_type.endswith(CONTAINER_ENVS):
            fields = _fields(getattr(_load("minisweagent.environments.local"), "LocalEnvironmentConfig", None))
            recorded_env = {k: v for k, v in recorded_env.items() if fields is None or k in fields}
            self.degradations.append(f"environment: {env_type.rpartition('.')[2]} recorded, replayed locally "
                                     f"(LocalEnvironment at {workspace})")
        elif not env_type.endswith("environments.local.LocalEnvironment"):
            raise Refusal("unsupported", f"environment {env_type!r} is not supported (LocalEnvironment, or a "
                                         f"container environment replayed locally: {', '.join(CONTAINER_ENVS)})")
        self.env = env_class(**{**recorded_env, "cwd": workspace})
        model_config = dict(config.get("model") or {})
        if api is not None:  # replay never queries the model: any recorded class (e.g. DeterministicModel) builds
            model_config["cost_tracking"] = "ignore_errors"
            kwargs = dict(model_config.get("model_kwargs") or {})
            kwargs.update(api_base=api["api_base"], api_key=api["api_key"])
            if not str(model_config.get("model_name", "")).startswith("openai/"):
                kwargs["custom_llm_provider"] = "openai"  # the bridge speaks Chat Completions only
            model_config["model_kwargs"] = kwargs
        get_model = _load("minisweagent.models").get_model
        model_type = str(config.get("model_type", ""))
        try:
            self.model = get_model(config=model_config | {"model_class": model_type})
        except Exception as error:
            if api is not None:  # a continuation asks the model: only the recorded class is faithful
                raise Refusal("unsupported", f"model class {model_type!r} cannot be built: "
                                             f"{type(error).__name__}: {error}") from error
            fallback = next(path for word, path in FALLBACK_MODELS[0 if self.major >= 2 else 2:]
                            if word in model_type.lower())
            plain = {key: model_config[key] for key in ("model_name", "model_kwargs") if key in model_config}
            self.model = get_model(config=plain | {"model_class": fallback, "cost_tracking": "ignore_errors"})
            self.degradations.append(f"model: {model_type or '(none)'} could not be built here "
                                     f"({type(error).__name__}: {str(error)[:200]}); observations formatted by "
                                     f"{fallback.rpartition('.')[2]}")
        self.agent = self._agent(dict(config.get("agent") or {}), str(config.get("agent_type", "")))

    def _agent(self, agent_config: dict[str, Any], agent_type: str) -> Any:
        if self.major < 2:  # 1.x: DefaultAgent (InteractiveAgent would prompt on stdin at the step limit)
            default = _load("minisweagent.agents.default")
            fields = set(default.AgentConfig.__dataclass_fields__)
            return default.DefaultAgent(self.model, self.env, **{k: v for k, v in agent_config.items() if k in fields})
        if agent_type.endswith("InteractiveAgent"):
            agent_config.update(mode="yolo", confirm_exit=False)
            cls = _class("minisweagent.agents.interactive.InteractiveAgent")
        else:
            for key in INTERACTIVE_KEYS:
                agent_config.pop(key, None)
            cls = _class("minisweagent.agents.default.DefaultAgent")
        agent_config["output_path"] = None
        return cls(self.model, self.env, **agent_config)

    # -- replay ---------------------------------------------------------------------------------------------------

    def execute(self, action: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        reply = self._execute_v1(str(action["command"])) if self.major < 2 else self._execute_v2(action)
        reply["duration_ms"] = int((time.monotonic() - started) * 1000)
        return reply

    def _execute_v1(self, command: str) -> dict[str, Any]:
        default = _load("minisweagent.agents.default")
        seen: dict[str, Any] = {}
        execute = self.env.execute

        def recording(cmd: str, *args: Any, **kwargs: Any) -> Any:
            output = execute(cmd, *args, **kwargs)
            seen.update(output)
            return output

        self.env.execute = recording  # observe the raw output dict the agent's own path produces
        submitted = False
        try:
            output = self.agent.execute_action({"action": command})
            content = self.agent.render_template(self.agent.config.action_observation_template, output=output)
        except default.ExecutionTimeoutError as error:
            content, seen = str(error), {"output": seen.get("output", ""), "returncode": -1,
                                         "exception_info": "timeout"}
        except default.Submitted as error:
            content, submitted = str(error), True
        finally:
            self.env.execute = execute
        message = {"role": "user", "content": content, "timestamp": time.time()}
        output = {"output": seen.get("output", ""), "returncode": seen.get("returncode"),
                  "exception_info": seen.get("exception_info", "")}
        return {"message": message, "output": output, "submitted": submitted}

    def _execute_v2(self, action: dict[str, Any]) -> dict[str, Any]:
        interrupt = _load("minisweagent.exceptions").InterruptAgentFlow
        try:
            output = self.env.execute(action)
        except interrupt as error:
            exit_message = error.messages[0] if error.messages else {}
            return {"message": exit_message, "output": {}, "submitted": True}
        carrier = {"role": "assistant", "content": "", "extra": {"actions": [action]}}
        messages = self.model.format_observation_messages(carrier, [output], self.agent.get_template_vars())
        if len(messages) != 1:
            raise ValueError(f"the formatter returned {len(messages)} observation messages for one action")
        return {"message": messages[0], "output": {k: output.get(k) for k in ("output", "returncode",
                                                                             "exception_info")},
                "submitted": False}

    # -- continuation ---------------------------------------------------------------------------------------------

    def continue_from(self, prefix: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
        agent, prefix_calls = self.agent, int(request["prefix_calls"])
        agent.config.step_limit = int(request["step_limit"])
        if hasattr(agent.config, "cost_limit"):
            agent.config.cost_limit = 0
        agent.messages = [dict(message) for message in prefix]
        prompt = request.get("boundary_prompt")
        output = Path(request["output"])
        if self.major < 2:
            self.model.n_calls = prefix_calls
            if prompt:
                agent.add_message("user", prompt)
            status, error = self._loop_v1(output)
            n_calls = self.model.n_calls
        else:
            agent.n_calls = prefix_calls
            if prompt:
                agent.add_messages(self.model.format_message(role="user", content=prompt))
            status, error = self._loop_v2(output)
            n_calls = agent.n_calls
        return {"exit_status": status, "n_calls": n_calls, "error": error}

    def _loop_v1(self, output: Path) -> tuple[str | None, str | None]:
        """The body of 1.x ``DefaultAgent.run`` after its message reset, saved like ``mini`` saves."""
        default = _load("minisweagent.agents.default")
        save_traj = _load("minisweagent.run.utils.save").save_traj
        agent = self.agent
        status: str | None = None
        result: str | None = None
        extra: dict[str, Any] | None = None
        try:
            while True:
                try:
                    agent.step()
                except default.NonTerminatingException as error:
                    agent.add_message("user", str(error))
                except default.TerminatingException as error:
                    agent.add_message("user", str(error))
                    status, result = type(error).__name__, str(error)
                    break
        except Exception as error:  # mini.py records the exception as the exit status
            status, result = type(error).__name__, str(error)
            extra = {"traceback": traceback.format_exc()}
        finally:
            save_traj(agent, output, exit_status=status, result=result, extra_info=extra, print_path=False)
        return status, (result if extra else None)

    def _loop_v2(self, output: Path) -> tuple[str | None, str | None]:
        """The loop of 2.x ``DefaultAgent.run`` after its message reset, saved after every step. Releases before
        2.4 count no consecutive format errors: their loop treats a FormatError like any InterruptAgentFlow."""
        exceptions = _load("minisweagent.exceptions")
        agent = self.agent
        counts = hasattr(agent, "n_consecutive_format_errors")
        format_error = exceptions.FormatError if counts else ()
        error_text: str | None = None
        while True:
            try:
                agent.step()
                if counts:
                    agent.n_consecutive_format_errors = 0
            except format_error as error:
                agent.cost += error.messages[0].get("extra", {}).get("cost", 0.0)
                agent.n_consecutive_format_errors += 1
                limit = agent.config.max_consecutive_format_errors
                agent.add_messages(*error.messages)
                if 0 < limit <= agent.n_consecutive_format_errors:
                    agent.add_messages({"role": "exit", "content": "RepeatedFormatError",
                                        "extra": {"exit_status": "RepeatedFormatError", "submission": ""}})
            except exceptions.InterruptAgentFlow as error:
                agent.add_messages(*error.messages)
            except Exception as error:
                agent.handle_uncaught_exception(error)
                error_text = f"{type(error).__name__}: {error}"
            finally:
                agent.save(output)
            if agent.messages and agent.messages[-1].get("role") == "exit":
                break
        last = agent.messages[-1].get("extra", {}) if agent.messages else {}
        return last.get("exit_status"), error_text


def _fields(config_class: Any) -> set[str] | None:
    """The field names of a dataclass (1.x) or pydantic model (2.x) config; None when unknown."""
    if config_class is None:
        return None
    if hasattr(config_class, "model_fields"):
        return set(config_class.model_fields)
    if hasattr(config_class, "__dataclass_fields__"):
        return set(config_class.__dataclass_fields__)
    return None


def _handle(state: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "open":
        version = _load("minisweagent").__version__
        if version != request.get("version"):
            raise Refusal("unsupported", f"the venv has mini-swe-agent {version}, expected {request.get('version')}")
        try:
            state["source"] = json.loads(Path(request["source"]).read_text("utf-8"))
        except (OSError, ValueError) as error:
            raise Refusal("trajectory", f"cannot read the recording: {error}") from error
        state["workspace"] = request["workspace"]
        try:
            loaded = Session(state["source"], state["workspace"])
        except Refusal:
            raise
        except Exception as error:  # anything else while rebuilding: nothing has run yet
            raise Refusal("trajectory", f"{type(error).__name__}: {error}") from error
        state["session"] = loaded
        return {"pid": os.getpid(), "mini_version": version, "protocol": PROTOCOL,
                "degradations": loaded.degradations}
    if op == "execute":
        session: Session = state["session"]
        return session.execute(dict(request["action"]))
    if op == "continue":
        prefix = json.loads(Path(request["prefix"]).read_text("utf-8"))
        api = {"api_base": request["api_base"], "api_key": request["api_key"]}
        continuing = Session(state["source"], state["workspace"], api)
        return continuing.continue_from(list(prefix["messages"]), request)
    if op == "close":
        return {}
    raise ValueError(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: companion.py <socket path>", file=sys.stderr)
        return 2
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(argv[1])
    reader = connection.makefile("r", encoding="utf-8")
    writer = connection.makefile("w", encoding="utf-8")
    writer.write(json.dumps({"ok": True, "hello": PROTOCOL, "pid": os.getpid()}) + "\n")
    writer.flush()
    state: dict[str, Any] = {}
    for line in reader:
        request = json.loads(line)
        try:
            reply = {"ok": True, **_handle(state, request)}
        except Refusal as error:
            reply = {"ok": False, "error": str(error), "refusal": error.kind}
        except Exception as error:
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        writer.write(json.dumps(reply) + "\n")
        writer.flush()
        if request.get("op") == "close":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
