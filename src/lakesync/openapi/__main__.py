"""``python -m lakesync.openapi [FILE]``."""

from __future__ import annotations

import json

from lakesync.openapi.builder import build_document
from lakesync.openapi.markdown import update_markdown


def main(argv: list[str] | None = None) -> None:
    """``python -m lakesync.openapi``: print the document; ``python -m lakesync.openapi FILE``: regenerate FILE's
    generated section."""
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(json.dumps(build_document(), indent=2, ensure_ascii=False))
        return
    path = Path(args[0])
    path.write_text(update_markdown(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
