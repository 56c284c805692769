"""The test hook behind ``supervisor.inject_step_fault`` (``completer-lsp --fault-after-steps N``): every model step
after the N-th raises ``InjectedFault``, as a dead device would, so that the supervisor's restart path is tested
against a real engine."""

from __future__ import annotations

from ..base import InjectedFault


class StepFaults:
    """A mixin: ``fault_after_steps`` (None: off) and ``fault_state`` (steps counted, faults raised) are set by
    ``supervisor.inject_step_fault``; each model step calls ``_check_fault`` first."""

    fault_after_steps: int | None = None
    fault_state: dict

    def _check_fault(self) -> None:
        if self.fault_after_steps is not None:
            self.fault_state["steps"] += 1
            if self.fault_state["steps"] > self.fault_after_steps:
                self.fault_state["raised"] += 1
                raise InjectedFault(f"injected fault at engine step {self.fault_state['steps']}")
