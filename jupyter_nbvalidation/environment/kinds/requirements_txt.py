"""``requirements.txt``: read as a requirements file by the one check of requirement
lines (collector.py): ``-r``, ``-c``, local paths relative to its folder."""

from __future__ import annotations

from jupyter_nbvalidation.environment.kinds.base import PLACE_BESIDE, Contribution, Discovered, Kind


class RequirementsTxt(Kind):
    """pip's requirements file, as it is."""

    names = ("requirements.txt",)

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        # read=None: the checker reads the file itself (its -r and -c files too)
        return Contribution("requirements.txt beside the notebook" if found.place == PLACE_BESIDE else found.where)
