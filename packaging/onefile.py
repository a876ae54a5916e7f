"""Write the one-file skyd: the shell launcher (packaging/onefile_launcher.sh) followed by a
gzip'd tar of a one-folder build, keyed by the payload's sha256.

    python packaging/onefile.py dist/onedir/skyd dist/onefile/skyd

The payload is reproducible (sorted entries, owner root, fixed mtime: $SOURCE_DATE_EPOCH or
0), so the same one-folder build always gives the same hash and cache folder.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
from pathlib import Path

LAUNCHER = Path(__file__).with_name("onefile_launcher.sh")


def payload(src: Path) -> bytes:
    """src (a folder holding the executable ``skyd``) as a gzip'd tar under ``skyd/``."""
    if not (src / "skyd").is_file() or not os.access(src / "skyd", os.X_OK):
        raise SystemExit(f"onefile: {src}/skyd is not an executable (build the one-folder first)")
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

    def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = mtime
        return ti

    entries: list[Path] = []
    for root, dirs, files in os.walk(src):  # symlinks (to folders too) are kept as links
        dirs.sort()
        entries += [Path(root) / n for n in sorted(dirs + files)]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(src, arcname="skyd", recursive=False, filter=norm)
            for p in entries:
                tar.add(p, arcname="skyd/" + p.relative_to(src).as_posix(), recursive=False,
                        filter=norm)
    return buf.getvalue()


def header(digest: str) -> bytes:
    """The launcher with its hash and payload offset (the header's own length) filled in."""
    text = LAUNCHER.read_text()
    offset = 0
    while True:
        out = text.replace("@HASH@", digest).replace("@OFFSET@", str(offset)).encode()
        if len(out) == offset:
            return out
        offset = len(out)


def build(src: Path, out: Path) -> str:
    data = payload(src)
    digest = hashlib.sha256(data).hexdigest()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header(digest))
        f.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return digest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: onefile.py ONEDIR_FOLDER OUTPUT", file=sys.stderr)
        return 2
    digest = build(Path(argv[0]), Path(argv[1]))
    print(f"onefile: {argv[1]} (payload sha256 {digest[:12]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
