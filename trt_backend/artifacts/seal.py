"""A build folder's manifest covers itself: a SHA-256 digest of its canonical content (plan,
profiles, build options, versions, target and every file's SHA-256) stored in it and checked on
load, and optionally an HMAC-SHA256 signature with a key shared between the machine that builds
and the machines that run, for folders shipped between them.

The digest catches an edited or damaged manifest (anyone can recompute it); the signature
catches a deliberate edit (only a holder of the key can sign). A manifest with no digest (written
before digests, or with it removed) is refused: it cannot be told from an edited one."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

from trt_backend._files import canonical_json, sha256_bytes
from trt_backend.errors import ArtifactError, OptionsError, SignatureError

MANIFEST = "manifest.json"  # a build folder's manifest, the file sealed here
DIGEST = "digest"  # manifest key: "sha256:<hex>" of the canonical content
SIGNATURE = "signature"  # manifest key: "hmac-sha256:<hex>" of the canonical content
SIGN_KEY_ENV = "TRT_BACKEND_SIGN_KEY"
_SEAL_KEYS = (DIGEST, SIGNATURE)


def canonical(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's content without its seal, as sorted compact JSON (what digest and signature cover)."""
    return canonical_json({k: v for k, v in manifest.items() if k not in _SEAL_KEYS})


_NODES_MARK = "\0nodes\0"


def manifest_text(manifest: Mapping[str, Any]) -> str:
    """The manifest's JSON as a folder holds it: indented, but for the plan's row per node, on one
    line (most of a large model's manifest, which the indenting encoder, Python's own where the
    compact one is C's, took 14 ms to write for 1,500 nodes)."""
    plan = manifest.get("plan")
    if not isinstance(plan, Mapping) or "nodes" not in plan:
        return json.dumps(manifest, indent=1) + "\n"
    text = json.dumps({**manifest, "plan": {**plan, "nodes": _NODES_MARK}}, indent=1)
    mark = json.dumps(_NODES_MARK)
    if text.count(mark) != 1:  # (a name in the model spelled as the mark)
        return json.dumps(manifest, indent=1) + "\n"
    return text.replace(mark, json.dumps(plan["nodes"])) + "\n"


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the manifest's canonical content."""
    return "sha256:" + sha256_bytes(canonical(manifest))


def signature(manifest: Mapping[str, Any], key: bytes) -> str:
    """``hmac-sha256:<hex>`` of the manifest's canonical content under ``key``."""
    return "hmac-sha256:" + hmac.new(key, canonical(manifest), hashlib.sha256).hexdigest()


def seal(manifest: dict[str, Any], key: bytes | None = None) -> dict[str, Any]:
    """Store the digest (and, with ``key``, the signature) in ``manifest``; returns it."""
    for k in _SEAL_KEYS:
        manifest.pop(k, None)
    manifest[DIGEST] = manifest_digest(manifest)
    if key is not None:
        manifest[SIGNATURE] = signature(manifest, key)
    return manifest


def check_seal(manifest: Mapping[str, Any], where: str, key: bytes | None = None) -> None:
    """ArtifactError when ``manifest`` (read from ``where``) lacks its digest or does not match
    it; SignatureError when ``key`` is given and the manifest is unsigned or signed otherwise."""
    stored = manifest.get(DIGEST)
    if stored is None:
        raise ArtifactError(f"{where}: has no digest (written by a trt-backend before manifests were sealed, "
                            "or edited); rebuild it with trt-backend build")
    if not isinstance(stored, str) or not hmac.compare_digest(stored, manifest_digest(manifest)):
        raise ArtifactError(f"{where}: content does not match its digest (the manifest was edited or is corrupt); "
                            "rebuild it with trt-backend build")
    if key is None:
        return
    signed = manifest.get(SIGNATURE)
    if signed is None:
        raise SignatureError(f"{where}: is not signed, and a signing key was given (--sign-key or {SIGN_KEY_ENV}); "
                             "build it with trt-backend build --sign-key")
    if not isinstance(signed, str) or not hmac.compare_digest(signed, signature(manifest, key)):
        raise SignatureError(f"{where}: signature does not match the signing key (signed with another key, "
                             "or edited and re-digested)")


def sign_key(value: str | bytes | None, *, use_env: bool = True) -> bytes | None:
    """The signing key from ``value``: the key itself, ``@FILE`` (the file's bytes, one trailing
    newline dropped) or bytes; without one, from ``TRT_BACKEND_SIGN_KEY`` (same forms) when
    ``use_env``; None when neither gives one."""
    if value is None and use_env:
        value = os.environ.get(SIGN_KEY_ENV) or None
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        key = bytes(value)
    elif isinstance(value, str) and value.startswith("@"):
        path = value[1:]
        try:
            with open(path, "rb") as f:
                key = f.read()
        except OSError as e:
            raise OptionsError(f"signing key file {path}: cannot read it ({e.strerror or e})") from None
        key = key[:-2] if key.endswith(b"\r\n") else key[:-1] if key.endswith(b"\n") else key
    elif isinstance(value, str):
        key = value.encode("utf-8")
    else:
        raise OptionsError(f"a signing key is text, @FILE or bytes, got {type(value).__name__}")
    if not key:
        raise OptionsError("the signing key is empty")
    return key
