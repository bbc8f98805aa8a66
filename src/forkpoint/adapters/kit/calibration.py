"""What every agent's calibration probe shares (forkpoint.adapters.calibrate): running the release under a
deadline, the record and parse checks, the replay-only check of its recording with a verified version's tool
semantics, the resume check (the release continuing a session rebuilt with a verified profile, judged by that
profile's bridge gate) and the search for the first candidate passing both."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import ReplayError
from forkpoint.core.errors import trajectory as trajectory_error

RUN_TIMEOUT_S = 240.0


def run_release(argv: list[str], env: dict[str, str], cwd: Path, what: str,
                timeout: float = RUN_TIMEOUT_S, stdout: Path | None = None) -> tuple[int, bytes]:
    """One real run of the release, killed with its process group at the deadline; (exit code, stderr tail).
    ``stdout``: a new file for its stdout (a file, never a pipe: a Bun binary exits without flushing one)."""
    from forkpoint.process.reaper import die_with_parent_hook

    out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600) \
        if stdout is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent_hook())
    finally:
        if stdout is not None:
            os.close(out)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise trajectory_error(f"the {what} did not finish within {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # the head too: a CLI's refusal of an option comes before the usage text it prints (yargs: Gemini CLI, Qwen Code)
    return proc.returncode, stderr if len(stderr) <= 16384 else stderr[:8192] + b"\n...\n" + stderr[-8192:]


def jsonl(lines: list[Any]) -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")


#: how a release's option parser refuses an option forkpoint passes (commander: Copilot CLI; yargs: Gemini CLI and
#: Qwen Code): the option in group 1, or yargs' comma-separated list in group 2
_REFUSED_OPTION = re.compile(r"error: unknown option '([^'\n]{1,80})'|Unknown arguments?: ([^\n]{1,200})")
#: how a ``record`` check's detail starts when the probe could not run for a reason of the release's own (an option
#: it has not got, GitHub authentication it asks for, a proxy it uses for loopback): a named difference
#: (benchmarks/_sweep.py counts it as one), not a probe that failed for no known reason
RELEASE_DIFFERENCE = "release difference: "


def refused_options(stderr: str) -> list[str]:
    """The options a release's own parser refused (``--skip-trust``, ``--disable-client-telemetry``), in order."""
    found: list[str] = []
    for match in _REFUSED_OPTION.finditer(stderr):
        for name in (match[1] or match[2]).split(","):
            name = name.strip()
            option = name if name.startswith("-") else f"--{name}"
            # yargs names each option twice (``skip-trust, skipTrust``): the camel-case alias is the same option
            if name and not re.search(r"[a-z][A-Z]", name) and option not in found:
                found.append(option)
    return found


def ran_ok(outcome: Outcome, code: int, stderr: bytes, diagnose: Callable[[str], str | None] | None = None) -> bool:
    """The probe run exited 0; else the failed ``record`` check and the reason, naming the release's difference
    when its stderr shows one: the options it refused (Gemini CLI 0.35.3 has no ``--skip-trust``), or what the
    agent's ``diagnose`` reads there."""
    if code == 0:
        return True
    text = stderr.decode("utf-8", "replace")
    refused = refused_options(text)
    why = f"no option {', '.join(f'`{o}`' for o in refused)} (forkpoint's command passes it)" if refused \
        else diagnose(text) if diagnose is not None else None
    named = f"{RELEASE_DIFFERENCE}{why}: " if why else ""
    outcome.checks.append(Check("record", False, f"{named}exit {code}; stderr: {text[-300:].strip()}"))
    outcome.reason = "the probe session did not complete as scripted"
    return False


def record_check(outcome: Outcome, summary: str, calls: int, missing: list[str], wrong: list[str],
                 wrong_what: str = "wrong error flag", more: str = "") -> bool:
    """Every scripted call has its result in the native files, with the error flag the script expects."""
    ok = not missing and not wrong
    problems = (f"; no result for {missing}" if missing else "") + (f"; {wrong_what} for {wrong}" if wrong else "")
    outcome.checks.append(Check("record", ok, f"exit 0, {summary}, {calls} tool calls{more}{problems}"))
    if not ok:
        outcome.reason = "the probe session did not complete as scripted"
    return ok


def parse_check(spec: AgentSpec, path: Path, version: str | None, calls: int, outcome: Outcome) -> bool:
    """The agent's parser reads the release's native file as written: its version (None: a format that names
    none, e.g. Pi's session) and every scripted call."""
    from forkpoint.adapters import get_adapter

    adapter = get_adapter(spec.name)
    parsed = adapter.parse(path)
    family = adapter.format_family(parsed)  # type: ignore[attr-defined]
    outcome.family = family
    found = sum(len(batch.calls) for batch in parsed.batches)
    ok = parsed.version == version and found == calls
    shown = parsed.version if parsed.version is not None else "(not recorded)"
    outcome.checks.append(Check("parse", ok, f"read as {family}, version {shown}, {found} calls"))
    if not ok:
        outcome.reason = f"the parser does not read the release's {path.name} as written"
    return ok


def first_match(candidates: list[str], passes: Callable[[str], bool], outcome: Outcome) -> str | None:
    """The first candidate (nearest first) whose tool semantics and resume envelope both match."""
    for candidate in candidates:
        if passes(candidate):
            return candidate
    outcome.reason = ("no verified version's tool semantics and resume envelope both match "
                      f"(tried {', '.join(candidates)})")
    return None


def _text(preview: object) -> str:
    text = preview.get("text") if isinstance(preview, dict) else None
    return str(text) if text is not None else ""


def difference(row: dict[str, Any]) -> str:
    """Where a differing observation's recorded and fresh texts part (their previews from a little before the
    first differing character): the difference itself, not two equal heads."""
    recorded, fresh = _text(row.get("historical_preview")), _text(row.get("fresh_preview"))
    equal = next((i for i, (a, b) in enumerate(zip(recorded, fresh, strict=False)) if a != b),
                 min(len(recorded), len(fresh)))
    start = max(0, equal - 30)

    def cut(text: str) -> str:
        return ("…" if start else "") + text[start:start + 90]

    return f"recorded {cut(recorded)!r}, fresh {cut(fresh)!r}"


def _source(run: Path, name: str, data: list[Any] | bytes) -> Path:
    run.mkdir()
    source = run / name
    source.write_bytes(data if isinstance(data, bytes) else jsonl(data))
    return source


def replay_check(agent: str, candidate: str, lines: list[Any] | bytes, steps: int, restore: Callable[[], Path],
                 scratch: Path, outcome: Outcome, *, name: str = "session.jsonl") -> bool:
    """Replay-only of the whole recording (``lines`` as JSONL, or the file's bytes; its version already rewritten
    to ``candidate``, so it is read with that version's tool semantics) in the restored workspace: every
    observation must be exact."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    run = scratch / f"replay-{candidate}"
    source = _source(run, name, lines)
    workspace = restore()
    result = execute(build_request({
        "agent": agent, "trajectory": str(source), "after_step": steps, "workspace": str(workspace),
        "state_dir": str(run / "state"), "output_dir": str(run / "out"), "run_id": "calibrate",
        "replay_only": True}, source="calibrate"))
    if result.failure is not None:
        outcome.checks.append(Check("tool_observations", False, f"replay failed: {result.failure.message}",
                                    candidate))
        return False
    compared, exact = result.metadata.get("compared_observations"), result.metadata.get("exact_observations")
    differing = []
    observations = run / "out" / "calibrate" / "observations.json"
    if observations.is_file():
        rows = json.loads(observations.read_text("utf-8"))
        rows = rows.get("observations", []) if isinstance(rows, dict) else []
        differing = [f"{row.get('name')} {row.get('id')} (batch {row.get('batch')}: {difference(row)})"
                     for row in rows if isinstance(row, dict) and not row.get("exact")]
    ok = bool(compared) and compared == exact
    outcome.checks.append(Check("tool_observations", ok, f"{exact} of {compared} observations exact"
                                + (f"; differ: {', '.join(differing)[:600]}" if differing else ""), candidate))
    return ok


def resume_check(agent: str, candidate: str, data: list[Any] | bytes, after_step: int, restore: Callable[[], Path],
                 entrypoint: Path, release: str, scratch: Path, outcome: Outcome, *, name: str,
                 reuse: bool = False) -> bool:
    """The release continues its own recording (``data``, read as ``candidate``) after ``after_step``: forkpoint
    rebuilds the session with ``candidate``'s profile, the RELEASE resumes it through the bridge (``--upstream
    stub``: no model), and ``candidate``'s gate must accept its first request. Used by the agents whose resume
    is a forkpoint continuation (a companion or runner, not only a CLI flag). ``reuse``: the prefix keeps its
    recorded observations (``--reuse-observations '*'``), so no tool re-runs before the release resumes (an agent
    whose tools start slowly, OpenHands; the replay check compares the tools apart)."""
    from forkpoint import runtimes
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    run = scratch / f"resume-{candidate}"
    source = _source(run, name, data)
    workspace = restore()
    try:
        with runtimes.trial(agent, candidate, entrypoint, release):
            result = execute(build_request({
                "agent": agent, "trajectory": str(source), "after_step": after_step, "workspace": str(workspace),
                "state_dir": str(run / "state"), "output_dir": str(run / "out"), "run_id": "calibrate",
                "upstream": "stub", "max_steps": 2, **({"reuse_observations": ["*"]} if reuse else {})},
                source="calibrate"))
    except ReplayError as error:
        outcome.checks.append(Check("resume_envelope", False, f"not continued: {error.message}", candidate))
        return False
    from forkpoint.bridge.server import REFUSED

    bridge = result.metadata.get("model_bridge")  # absent from some adapters' failed results: then the log says
    validated, refused = ((bridge.get("validated", 0), bridge.get("refused", 0) or int(bool(bridge.get("failed"))))
                          if isinstance(bridge, dict) else _verdicts(run / "state"))
    refused = refused or int(result.failure is not None and result.failure.message.startswith(REFUSED))
    ok = isinstance(validated, int) and validated >= 1 and refused == 0
    if ok:
        detail = f"the gate accepts the release's first request after the rebuilt prefix ({validated} validated)"
    else:
        why = result.failure.message if result.failure is not None else f"{validated} validated, {refused} refused"
        detail = (f"the gate refuses it: {why[:600]}" if refused else
                  f"the release made no request the gate accepted: {why[:600]}")
    outcome.checks.append(Check("resume_envelope", ok, detail, candidate))
    return ok


def _verdicts(state: Path) -> tuple[int, int]:
    """(validated, refused) requests in the bridge's verdict log of the check's run (its own scratch dir)."""
    validated = refused = 0
    for log in sorted(state.rglob("bridge-log.jsonl"))[:4]:
        if log.is_symlink() or not log.is_file() or log.stat().st_size > 64 * 1024 * 1024:
            continue
        for raw in log.read_text("utf-8", "replace").splitlines():
            try:
                verdict = json.loads(raw).get("verdict")
            except (ValueError, AttributeError):
                continue
            validated += verdict == "ok"
            refused += verdict == "refused"
    return validated, refused


def scripted_record_check(spec: AgentSpec, path: Path, errors: list[list[bool]], outcome: Outcome,
                          summary: str) -> bool:
    """The record check read through the agent's own parser, for a format whose call ids are not the scripted
    ones: batch by batch, every scripted call has its result, with the error flag the script expects (``errors``:
    per scripted turn with calls, per call)."""
    from forkpoint.adapters import get_adapter

    batches = [batch.calls for batch in get_adapter(spec.name).parse(path).batches]
    missing: list[str] = []
    wrong: list[str] = []
    for index, flags in enumerate(errors):
        calls = batches[index] if index < len(batches) else ()
        missing += [f"batch {index + 1} call {n + 1}" for n in range(len(calls), len(flags))]
        for call, flag in zip(calls, flags, strict=False):
            if call.historical is None:
                missing.append(call.call_id)
            elif call.historical.is_error != flag:
                wrong.append(call.call_id)
    wrong += [call.call_id for calls in batches[len(errors):] for call in calls]
    return record_check(outcome, summary, sum(map(len, errors)), missing, wrong,
                        "a wrong error flag (or unscripted)")


def match_candidates(agent: str, candidates: list[str], as_candidate: Callable[[str], bytes], steps: int,
                     restore: Callable[[], Path], entrypoint: Path, release: str, scratch: Path, outcome: Outcome,
                     *, name: str) -> str | None:
    """The first candidate whose replay of the whole recording (rewritten by ``as_candidate`` to name it) is
    exact and whose gate accepts the release resuming the recording after its first batch. The resume reuses the
    recorded observations (``resume_check``'s ``reuse``): the replay has just re-run every call, the first batch's
    included, and compared it; re-running that batch again would only start the agent's tools once more (OpenCode:
    a tool host, ~20 s), and a candidate whose tools differ fails whatever its resume says."""

    def passes(candidate: str) -> bool:
        data = as_candidate(candidate)
        tools_ok = replay_check(agent, candidate, data, steps, restore, scratch, outcome, name=name)
        resumed = resume_check(agent, candidate, data, 1, restore, entrypoint, release, scratch, outcome, name=name,
                               reuse=True)
        return resumed and tools_ok

    return first_match(candidates, passes, outcome)


def restore_files(cwd: Path, files: dict[str, str]) -> Path:
    """The probe's workspace recreated: ``files`` (relative path -> text) and nothing else."""
    import shutil

    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    for rel, content in files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(content, "utf-8")
    return cwd


def only_file(found: list[Path], what: str, max_bytes: int = 64 * 1024 * 1024) -> Path:
    """The one regular file the release wrote (``found``: a glob's matches), bounded."""
    if len(found) != 1 or found[0].is_symlink() or not found[0].is_file():
        raise trajectory_error(f"expected one {what} written by the release, found {len(found)}")
    if found[0].stat().st_size > max_bytes:
        raise trajectory_error(f"the release wrote a {what} larger than {max_bytes // (1024 * 1024)} MiB")
    return found[0]


def runner_env(home: Path, **extra: str) -> dict[str, str]:
    """A companion runner's environment for a probe (OpenHands V0 and SDK, kit.python_runner's runners run on the
    release's Python): credentials stripped, HOME and TMPDIR in the probe's scratch, litellm's local cost map (no
    download), the key ScriptedModel is called with; ``extra`` on top."""
    from forkpoint.process import sanitized_env

    env = sanitized_env(os.environ, strip_credentials=True)
    env.update({"HOME": str(home), "TMPDIR": str(home), "SCRIPTED_API_KEY": "scripted-calibration-key", "TZ": "UTC",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LOG_LEVEL": "WARNING", **extra})
    return env


def runner_result(path: Path) -> dict[str, Any]:
    """The runner's result (bounded, never through a link); empty when it wrote none."""
    if not path.is_file() or path.is_symlink():
        return {}
    data = json.loads(only_file([path], "runner result", 1024 * 1024).read_text("utf-8"))
    return data if isinstance(data, dict) else {}


def run_runner(argv: list[str], request: dict[str, Any], env: dict[str, str], scratch: Path, what: str,
               outcome: Outcome) -> dict[str, Any] | None:
    """One probe run of a companion runner: ``request`` written to scratch/request.json, ``argv`` + that path run
    as the release, its scratch/result.json read back; None (with the failed ``record`` check) when it exited
    non-zero, the runner's own error last in the detail (the release's stderr ends in warnings)."""
    (scratch / "request.json").write_text(json.dumps(request), "utf-8")
    code, stderr = run_release([*argv, str(scratch / "request.json")], env, scratch, what)
    result = runner_result(scratch / "result.json") if code != 0 else {}
    if not ran_ok(outcome, code, stderr + f"\nrunner: {str(result.get('error'))[:250]}".encode()
                  if result.get("error") else stderr):
        return None
    return runner_result(scratch / "result.json")


@dataclass(frozen=True)
class CliProbe:
    """One agent CLI's probe (Gemini CLI, Qwen Code, Copilot CLI): a headless ``-p TASK`` run of the release
    against ScriptedModel in a fresh workspace and HOME, whose one native session file is the recording."""

    agent: str
    files: dict[str, str]
    #: the scripted turns for a workspace at ``cwd`` (the last one text only)
    turns: Callable[[Path], list[list[dict[str, Any]]]]
    #: per scripted turn with calls, per call: whether the release must record it as an error
    errors: list[list[bool]]
    model: str
    #: (entrypoint, home) -> argv; the HOME's settings are written here
    command: Callable[[Path, Path], list[str]]
    #: (home, the model's base URL, entrypoint) -> the release's environment
    env: Callable[[Path, str, Path], dict[str, str]]
    #: (home, cwd) -> the session file the release wrote
    session: Callable[[Path, Path], Path]
    #: the version the release writes into its session (None: the format names none)
    recorded_version: Callable[[str], str | None]
    #: (session bytes, release version, candidate) -> the session naming ``candidate`` instead
    as_candidate: Callable[[bytes, str, str], bytes]
    #: a failed run's stderr -> the release's difference it shows, if any (Copilot: GitHub authentication)
    diagnose: Callable[[str], str | None] | None = None


class ProxySink:
    """A loopback listener the probe's proxy variables point at (instead of a closed port): it accepts and closes
    each connection and counts them, so a release that sends its loopback model requests through the proxy
    despite ``NO_PROXY`` (Qwen Code 0.15.6) is seen doing so."""

    def __init__(self) -> None:
        import socket
        import threading

        self.hits = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.hits += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with every proxy variable it sets pointing here."""
        return {name: self.url if name.lower() in ("http_proxy", "https_proxy", "all_proxy") else value
                for name, value in env.items()}


def probe_cli(cli: CliProbe, spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
              outcome: Outcome) -> str | None:
    """Record the probe session with the release, check it was written as scripted and reads with the agent's
    parser, then find the first candidate whose replay and resume match (``match_candidates``)."""
    from forkpoint.adapters.calibration import compact_requests
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore_files(cwd, cli.files)
    home.mkdir()
    turns = cli.turns(cwd)
    model = ScriptedModel(turns, seed=f"{cli.agent}/calibrate", model=cli.model)
    argv = cli.command(entrypoint, home)
    sink = ProxySink()
    try:
        with model.serve() as url:
            env = sink.environment(cli.env(home, url, entrypoint))
            code, stderr = run_release(argv, env, cwd, "probe session")
    finally:
        sink.close()
    if not ran_ok(outcome, code, stderr, cli.diagnose):
        return None
    if not model.requests and sink.hits:
        outcome.checks.append(Check("record", False, (
            f"{RELEASE_DIFFERENCE}its model requests go to HTTPS_PROXY despite NO_PROXY={env.get('NO_PROXY')} "
            f"({sink.hits} connection(s) to forkpoint's proxy sink, none to the model at {url}): exit {code}")))
        outcome.reason = "the probe session did not complete as scripted"
        return None
    session = cli.session(home, cwd)
    data = session.read_bytes()
    outcome.evidence.update({"session.jsonl": data, "requests.jsonl": compact_requests(model.requests)})
    lines = sum(1 for raw in data.splitlines() if raw.strip())
    if not scripted_record_check(spec, session, cli.errors, outcome, f"{lines} session lines") \
            or not parse_check(spec, session, cli.recorded_version(version), sum(map(len, cli.errors)), outcome):
        return None
    return match_candidates(spec.name, candidates, lambda candidate: cli.as_candidate(data, version, candidate),
                            len(cli.errors), lambda: restore_files(cwd, cli.files), entrypoint, version, scratch,
                            outcome, name="session.jsonl")
