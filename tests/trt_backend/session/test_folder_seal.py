"""The manifest of a build folder covers itself: a digest of its canonical content checked on
load (an edited profile is refused, a manifest without a digest too) and an optional HMAC-SHA256
signature (--sign-key / TRT_BACKEND_SIGN_KEY / Session.load(sign_key=...)). Real builds with
TensorRT-RTX on CPU, real files, the real CLI."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import trt_backend
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import ArtifactError, OptionsError, SignatureError
from trt_backend.session.options import SessionOptions
from trt_backend.artifacts.seal import SIGN_KEY_ENV, canonical, manifest_digest, sign_key
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]
KEY = "correct horse battery staple"
EMULATED = SessionOptions(emulate=True)
pytestmark = pytest.mark.usefixtures("flavor")


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch) -> None:
    monkeypatch.delenv(SIGN_KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """One unsigned and one signed build of the demo (signed through the CLI, key from a file)."""
    from trt_backend.artifacts.write import build as build_folder_build

    root = tmp_path_factory.mktemp("sealed")
    unsigned = str(root / "unsigned")
    build_folder_build(DEMO_PATH, unsigned, PROFILE)
    key_file = root / "key.txt"
    key_file.write_text(KEY + "\n")
    signed = str(root / "signed")
    assert main(["build", DEMO_PATH, "-o", signed, "--min-shapes", "image:1x3x32x32", "--opt-shapes",
                 "image:2x3x32x32", "--max-shapes", "image:4x3x32x32", "--sign-key", f"@{key_file}"]) == 0
    return {"unsigned": unsigned, "signed": signed}


def copy_of(src: str, dst) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def edit_manifest(folder: str, change, reseal: bool = False) -> None:
    path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(path))
    change(manifest)
    if reseal:  # the digest recomputed, any signature kept as it was
        manifest["digest"] = manifest_digest(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)


def widen_max_profile(manifest: dict) -> None:
    manifest["plan"]["segments"][0]["profiles"][0]["image"]["max"] = [64, 3, 32, 32]


def test_digest_is_of_the_canonical_content_and_checked(folders) -> None:
    manifest = json.load(open(os.path.join(folders["unsigned"], "manifest.json")))
    assert manifest["digest"] == manifest_digest(manifest) and manifest["digest"].startswith("sha256:")
    assert "signature" not in manifest
    # key order and whitespace are not content; every value is
    shuffled = dict(reversed(list(manifest.items())))
    assert manifest_digest(shuffled) == manifest["digest"]
    for key in ("plan", "build_options", "segments", "tensorrt", "gpu_target", "versions"):
        assert f'"{key}":' in canonical(manifest).decode()
    changed = json.loads(json.dumps(manifest))
    changed["segments"][0]["engine_sha256"] = "0" * 64
    assert manifest_digest(changed) != manifest["digest"]
    sess = Session.load(folders["unsigned"], EMULATED)
    assert sess.folder_manifest is not None and sess.folder_manifest["digest"] == manifest["digest"]


def test_an_edited_max_profile_is_refused(folders, tmp_path, capsys) -> None:
    """The issue's case: a segment's max profile widened to 64x3x32x32 in manifest.json was accepted."""
    folder = copy_of(folders["unsigned"], tmp_path / "edited")
    edit_manifest(folder, widen_max_profile)
    with pytest.raises(ArtifactError, match=r"manifest\.json: content does not match its digest \(the manifest was "
                                            r"edited or is corrupt\)"):
        trt_backend.load(folder, EMULATED)
    with pytest.raises(ArtifactError, match="does not match its digest"):
        Session(folder, options=EMULATED)
    for command in (["run", folder, "--emulate"], ["compare", folder, "--emulate"], ["inspect", folder],
                    ["bench", folder, "--emulate", "--duration-s", "0.01", "--iterations", "1", "--no-progress"]):
        assert main(command) == (2 if command[0] == "compare" else 1), command
        err = capsys.readouterr().err.strip()
        assert err.startswith("trt-backend: error: ") and "does not match its digest" in err and "\n" not in err


def test_a_manifest_without_digest_is_refused(folders, tmp_path) -> None:
    """Folders written before manifests were sealed cannot be told from edited ones: refused,
    with the way out (rebuild)."""
    folder = copy_of(folders["unsigned"], tmp_path / "old")
    edit_manifest(folder, lambda m: m.pop("digest"))
    with pytest.raises(ArtifactError, match=r"has no digest \(written by a trt-backend before manifests were sealed, "
                                            r"or edited\); rebuild it with trt-backend build"):
        trt_backend.load(folder, EMULATED)


def test_signed_folders_load_with_their_key_only(folders, tmp_path, monkeypatch) -> None:
    signed = folders["signed"]
    manifest = json.load(open(os.path.join(signed, "manifest.json")))
    assert manifest["signature"].startswith("hmac-sha256:") and len(manifest["signature"]) == 12 + 64
    x = np.random.default_rng(0).random((3, 3, 32, 32), dtype=np.float32)
    want = Session.load(folders["unsigned"], EMULATED).run(None, {"image": x})
    for key in (KEY, KEY.encode()):
        got = Session.load(signed, EMULATED, sign_key=key).run(None, {"image": x})
        np.testing.assert_array_equal(got[0], want[0])
    Session.load(signed, EMULATED)  # no key asked for: the digest still holds
    with pytest.raises(SignatureError, match="signature does not match the signing key"):
        Session.load(signed, EMULATED, sign_key="another key")
    with pytest.raises(SignatureError, match="is not signed, and a signing key was given"):
        Session.load(folders["unsigned"], EMULATED, sign_key=KEY)
    # an edit re-digested by whoever made it: the digest matches, the signature does not
    folder = copy_of(signed, tmp_path / "forged")
    edit_manifest(folder, widen_max_profile, reseal=True)
    Session.load(folder, EMULATED)  # without a key, a re-digested edit cannot be told apart
    with pytest.raises(SignatureError, match="signature does not match"):
        Session.load(folder, EMULATED, sign_key=KEY)
    # the key from the environment, as the CLI takes it; SessionOptions(sign_key=...) likewise
    monkeypatch.setenv(SIGN_KEY_ENV, KEY)
    with pytest.raises(SignatureError, match="is not signed"):
        Session(folders["unsigned"], options=EMULATED)
    opened = Session(signed, options=EMULATED).folder_manifest
    assert opened is not None and opened["signature"] == manifest["signature"]
    monkeypatch.delenv(SIGN_KEY_ENV)
    with pytest.raises(SignatureError, match="signature does not match"):
        Session(signed, options=SessionOptions(emulate=True, sign_key="wrong"))


def test_sign_key_on_the_command_line(folders, tmp_path, capsys, monkeypatch) -> None:
    signed = folders["signed"]
    assert main(["run", signed, "--emulate", "--sign-key", KEY]) == 0
    assert "executors: emulated x2, onnxruntime x1" in capsys.readouterr().out
    assert main(["inspect", signed, "--sign-key", KEY]) == 0
    assert "signed (HMAC-SHA256)" in capsys.readouterr().out
    for command in (["run", signed, "--emulate", "--sign-key", "nope"], ["compare", signed, "--sign-key", "nope"],
                    ["inspect", folders["unsigned"], "--sign-key", KEY]):
        assert main(command) == (2 if command[0] == "compare" else 1)
        err = capsys.readouterr().err.strip()
        assert err.startswith("trt-backend: error: ") and "sign" in err and "\n" not in err
    monkeypatch.setenv(SIGN_KEY_ENV, "nope")
    assert main(["run", signed, "--emulate"]) == 1
    assert "signature does not match the signing key" in capsys.readouterr().err
    monkeypatch.setenv(SIGN_KEY_ENV, KEY)
    out = str(tmp_path / "env_signed")
    assert main(["build", DEMO_PATH, "-o", out, "--shapes", "image:2x3x32x32"]) == 0  # signs with the env key
    assert ", signed with HMAC-SHA256)\n" in capsys.readouterr().out
    monkeypatch.delenv(SIGN_KEY_ENV)
    Session.load(out, EMULATED, sign_key=KEY)
    assert main(["build", DEMO_PATH, "-o", str(tmp_path / "x"), "--sign-key", f"@{tmp_path / 'missing.key'}"]) == 1
    assert "signing key file" in capsys.readouterr().err and not os.path.exists(tmp_path / "x")


def test_sign_key_forms(tmp_path, monkeypatch) -> None:
    (tmp_path / "k").write_bytes(b"secret\r\n")
    assert sign_key(f"@{tmp_path / 'k'}") == b"secret"
    assert sign_key("secret") == sign_key(b"secret") == b"secret"
    assert sign_key(None) is None
    monkeypatch.setenv(SIGN_KEY_ENV, f"@{tmp_path / 'k'}")
    assert sign_key(None) == b"secret" and sign_key(None, use_env=False) is None
    (tmp_path / "empty").write_bytes(b"\n")
    with pytest.raises(OptionsError, match="the signing key is empty"):
        sign_key(f"@{tmp_path / 'empty'}")
    with pytest.raises(OptionsError, match="sign_key must be text, @FILE or bytes, got int"):
        SessionOptions(sign_key=3)  # type: ignore[arg-type]
    assert "secret" not in repr(SessionOptions(sign_key="secret"))
