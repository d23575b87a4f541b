"""Pinned Maven artifacts fetched on first use: the embedded broker's jars, the kit's Spark jars
(Delta, spark-avro, the Kafka client) and the registry's archive.

A lock file in this package (`kafka-broker.lock`, `spark-jars.lock`, `schema-registry.lock`) names
each artifact by its Maven coordinates and SHA-1, the exact files the project's own tests run.
`fetched(lock)` downloads them once from Maven Central (or `SHARELAKE_MAVEN_REPO`, a mirror) into a
folder of the user's cache (`SHARELAKE_TESTING_CACHE`, else `~/.cache/sharelake`), checks every
SHA-1, and returns the folder; a later call finds it complete and downloads nothing. A folder is
made whole in a temporary folder and renamed into place, so a run killed mid-download leaves
nothing a later run would take.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPO_ENV = "SHARELAKE_MAVEN_REPO"
CACHE_ENV = "SHARELAKE_TESTING_CACHE"


@dataclass(frozen=True)
class Artifact:
    """One file of a Maven repository: `group:name:version[:classifier][@ext]` and its SHA-1."""

    group: str
    name: str
    version: str
    sha1: str
    classifier: str = ""
    ext: str = "jar"

    @classmethod
    def parse(cls, line: str) -> Artifact:
        """A lock file's line: `group:name:version[:classifier][@ext] sha1`."""
        coords, sha1 = line.split()
        coords, _, ext = coords.partition("@")
        group, name, version, *classifier = coords.split(":")
        return cls(group, name, version, sha1, classifier[0] if classifier else "", ext or "jar")

    def line(self) -> str:
        classifier = f":{self.classifier}" if self.classifier else ""
        ext = f"@{self.ext}" if self.ext != "jar" else ""
        return f"{self.group}:{self.name}:{self.version}{classifier}{ext} {self.sha1}"

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}{'-' + self.classifier if self.classifier else ''}.{self.ext}"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"


def parse_lock(text: str) -> list[Artifact]:
    """The artifacts a lock file's text pins (one per line; `#` lines are comments)."""
    return [Artifact.parse(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def locked(lock: str) -> list[Artifact]:
    """The artifacts a lock file of this package pins."""
    return parse_lock(resources.files(__package__).joinpath(lock).read_text())


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sharelake")


def fetched(lock: str) -> Path:
    """The folder holding every artifact `lock` pins, downloaded and checked on the first call."""
    artifacts = locked(lock)
    digest = hashlib.sha1("".join(a.line() for a in artifacts).encode()).hexdigest()[:12]
    folder = cache_dir() / f"{Path(lock).stem}-{digest}"  # a new lock is a new folder
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    repo = os.environ.get(REPO_ENV, MAVEN_CENTRAL)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda a: download(a, repo, staging), artifacts))
        try:
            staging.rename(folder)
        except OSError:  # another process completed it first: theirs is as good
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


@retry(
    retry=retry_if_exception_type(OSError),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=1, max=10),
    reraise=True,
)
def download(artifact: Artifact, repo: str, into: Path) -> Path:
    """One artifact into `into`, its SHA-1 checked; a mismatch is an error, never a retry."""
    target = into / artifact.file_name
    url = artifact.url(repo)
    sha1 = hashlib.sha1()
    with urllib.request.urlopen(url, timeout=60) as answer, target.open("wb") as out:
        while chunk := answer.read(1 << 20):
            sha1.update(chunk)
            out.write(chunk)
    if sha1.hexdigest() != artifact.sha1:
        raise ValueError(f"{url}: SHA-1 {sha1.hexdigest()}, the lock pins {artifact.sha1}")
    return target


def unpacked(lock: str) -> Path:
    """The folder a lock's one archive (a tar.gz) is unpacked into, on the first call."""
    archive = next(fetched(lock).glob("*.tar.gz"))
    folder = archive.parent / "unpacked"
    if folder.is_dir():
        return folder
    staging = Path(tempfile.mkdtemp(prefix=".unpacked.", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        try:
            staging.rename(folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
