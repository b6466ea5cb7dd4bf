"""The storage floor: files of a run directory, stage records, checksums, lineage and the writer lock.

Knows no stage (stages live above it, in :mod:`clusterclip.stages`); every other module reads and writes a
run directory through it. File names are in :mod:`clusterclip.store.layout`.
"""

from clusterclip.store.files import (
    # crash tests and clean-up
    FAULT_ENV,
    TMP_PREFIX,
    # errors
    LinkInRunDirError,
    StaleArtifactError,
    # atomic writes and reads (never pickled)
    atomic_path,
    atomic_write,
    # digests
    config_hash,
    file_digest,
    # modes and links
    file_mode,
    load_json,
    load_npy,
    refuse_links,
    save_json,
    save_npy,
)
from clusterclip.store.lineage import artifact_checksums, grown_from, record_output_hash
from clusterclip.store.lock import exclusive
from clusterclip.store.rundir import FORMAT_VERSION, RUN, RunDir

__all__ = [
    "FAULT_ENV", "FORMAT_VERSION", "RUN", "TMP_PREFIX", "LinkInRunDirError", "RunDir", "StaleArtifactError",
    "artifact_checksums", "atomic_path", "atomic_write", "config_hash", "exclusive", "file_digest", "file_mode",
    "grown_from", "load_json", "load_npy", "record_output_hash", "refuse_links", "save_json", "save_npy",
]
