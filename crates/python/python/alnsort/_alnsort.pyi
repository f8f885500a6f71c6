"""Type stub of the extension module alnsort._alnsort (crates/python/src/lib.rs)."""

import os
from typing import Sequence, Union

__version__: str
ARGV0: str

def run(argv: Sequence[Union[str, "os.PathLike[str]"]]) -> str: ...
def sort_help() -> str: ...
