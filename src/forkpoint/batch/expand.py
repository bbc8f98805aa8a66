"""Job lines -> concrete jobs: detect the agent, parse each trajectory once, expand ``after_step`` ("all" = every
valid boundary), digest workspace sources and images once each, and compute identities (I/O: reads trajectories,
sources and the images' manifests).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from forkpoint.batch.jobs import BadJob, Job, JobLine, identity
from forkpoint.core.errors import ReplayError


class _Parsed:
    def __init__(self, agent: str, sha256: str, complete: int, cwd: str | None) -> None:
        self.agent, self.sha256, self.complete, self.cwd = agent, sha256, complete, cwd


def expand(lines: Iterable[JobLine | BadJob]) -> Iterator[Job | BadJob]:
    parsed: dict[tuple[Path, str | None], _Parsed | BadJob] = {}
    digests: dict[str, str | BadJob] = {}
    images: dict[str, str | BadJob] = {}
    for line in lines:
        if isinstance(line, BadJob):
            yield line
            continue
        key = (line.trajectory, line.agent)
        if key not in parsed:
            parsed[key] = _parse(line)
        trajectory = parsed[key]
        if isinstance(trajectory, BadJob):
            yield BadJob(line.line, trajectory.reason)
            continue
        image = line.options.get("image")
        image_digest: str | None = None
        if isinstance(image, str):
            if image not in images:
                images[image] = _image_digest(line.line, image)
            found_image = images[image]
            if isinstance(found_image, BadJob):
                yield BadJob(line.line, found_image.reason)
                continue
            image_digest = found_image
        digest: str | None = None
        source = line.options.get("workspace_from")
        if source is not None:
            if source not in digests:
                digests[source] = _digest(line.line, source)
            found = digests[source]
            if isinstance(found, BadJob):
                yield BadJob(line.line, found.reason)
                continue
            digest = found
        if line.after_step == "all":
            boundaries = list(range(1, trajectory.complete + 1))
            if not boundaries:
                yield BadJob(line.line, f"{line.trajectory} has no complete tool batch: no boundary to replay")
                continue
        elif isinstance(line.after_step, int):
            boundaries = [line.after_step]
        elif isinstance(line.after_step, list):
            boundaries = list(dict.fromkeys(line.after_step))
        else:
            yield BadJob(line.line, f"after_step {line.after_step!r} is not a boundary")
            continue
        for after in boundaries:
            if after > trajectory.complete:
                yield BadJob(line.line, f"after_step {after} is beyond the {trajectory.complete} complete batch(es) "
                                        f"of {line.trajectory}")
                continue
            yield Job(identity=identity(line, trajectory.agent, after, trajectory.sha256, digest, image_digest),
                      line=line.line,
                      trajectory=line.trajectory, trajectory_sha256=trajectory.sha256, agent=trajectory.agent,
                      after_step=after, mode=line.mode, recorded_cwd=trajectory.cwd, options=dict(line.options))


def _parse(line: JobLine) -> _Parsed | BadJob:
    from forkpoint.adapters import get_adapter
    from forkpoint.adapters.detect import guess_agent

    if not line.trajectory.is_file():
        return BadJob(line.line, f"trajectory {line.trajectory} does not exist or is not a regular file")
    try:
        agent = line.agent or guess_agent(line.trajectory)
        if agent is None:
            return BadJob(line.line, f"cannot tell which agent wrote {line.trajectory}; set \"agent\"")
        trajectory = get_adapter(agent).parse(line.trajectory)
    except ReplayError as error:
        return BadJob(line.line, f"{error.kind.category}: {error.message}")
    return _Parsed(agent, trajectory.source_sha256, trajectory.complete_count, trajectory.cwd)


def _digest(line: int, spec: str) -> str | BadJob:
    """What the workspace source holds: a directory's inventory hash, a tarball's SHA-256, a git URL@REV."""
    from forkpoint.core.hashing import file_sha256
    from forkpoint.workspace import inventory, parse_source

    try:
        source = parse_source(spec)
    except ReplayError as error:
        return BadJob(line, error.message)
    if source.kind == "dir":
        return f"dir:{inventory(Path(source.location)).sha256}"
    if source.kind == "tarball":
        return f"tarball:{file_sha256(Path(source.location))}"
    return f"git:{source.location}@{source.rev}"


def _image_digest(line: int, image: str) -> str | BadJob:
    """The image's manifest digest, or the job refused with the reason the run would give."""
    from forkpoint.sandbox.image import image_digest

    try:
        return image_digest(image)
    except ReplayError as error:
        return BadJob(line, error.message)
