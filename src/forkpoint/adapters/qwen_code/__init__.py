"""Qwen Code adapter: a 0.24.4 chat-recording JSONL in, a rebuilt session + the real ``qwen --resume`` out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.qwen_code.parse import parse_qwen
from forkpoint.adapters.qwen_code.spec import SPEC, VERSION
from forkpoint.core.model import FreshObservation, LaunchTarget, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.qwen_code.launch import QwenHooks


class QwenCodeAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_qwen)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.adapters.qwen_code.session import session_file_name, write_session

        destination = out_dir / session_file_name(plan.trajectory.native)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id,
                            write_session(plan, fresh, destination))

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.qwen_code.tools import QwenToolExecutor

        return QwenToolExecutor(context)

    # -- continuation ---------------------------------------------------------------------------------------------

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        from forkpoint.adapters.qwen_code.launch import recorded_model
        from forkpoint.runtimes import resolve_entrypoint

        recorded_model(trajectory.native)
        return resolve_entrypoint(SPEC.name, trajectory.version or VERSION, entrypoint)

    def hooks(self) -> QwenHooks:
        from forkpoint.adapters.qwen_code.launch import QwenHooks

        return QwenHooks()
