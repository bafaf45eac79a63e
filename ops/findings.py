"""What `manage.py doctor` finds: one line of its report, and whether it fails the command."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    section: str
    ok: bool
    message: str
    fix: str = ""
    note: bool = False
    # Production readiness: advice on a local install, a problem before going live (--deploy).
    readiness: bool = False

    @property
    def problem(self) -> bool:
        """Broken, whatever the installation is for."""
        return not self.ok and not self.note and not self.readiness

    @property
    def advice(self) -> bool:
        """To do before going live."""
        return not self.ok and not self.note and self.readiness

    def fails(self, deploy: bool) -> bool:
        return self.problem or (deploy and self.advice)
