"""Real inputs for trained models, made from what ships in packages: photos and a scanned page
from scikit-image's wheel (read as a zip, nothing installed), text lines rendered with the
machine's DejaVu fonts, and the bytes of the Python standard library's own files.

Every maker is seeded and returns a list of single-sample feeds (batch 1), so a model whose
batch dim is fixed at 1 takes them as they are and a tool that takes one feed gets the first."""
from __future__ import annotations

import ast
import codecs
import glob
import io
import os
import sys
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

FONT_DIR = "/usr/share/fonts/truetype/dejavu"
FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf",
         "DejaVuSerifCondensed.ttf", "DejaVuSansCondensed-Oblique.ttf")
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png", "rocket.jpg", "camera.png",
          "horse.png", "coins.png", "motorcycle_right.png", "page.png", "text.png", "hubble_deep_field.jpg")
PAGES = ("page.png", "text.png")


def _zen_words() -> tuple[str, ...]:
    """The words of the Zen of Python (real English text), read from the ``this`` module's
    source: importing it would print the poem."""
    with open(os.path.join(os.path.dirname(os.__file__), "this.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    coded = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "s")
    return tuple(codecs.decode(coded, "rot13").split())


WORDS = _zen_words()


class MissingData(Exception):
    """Something a maker reads is not on this machine; the message says how to get it."""


def photo_wheel(search: Sequence[str]) -> str:
    """The scikit-image wheel in the first folder of ``search`` that holds one."""
    for folder in search:
        found = sorted(glob.glob(os.path.join(os.path.expanduser(folder), "scikit_image-*.whl")))
        if found:
            return found[-1]
    raise MissingData("no scikit-image wheel for the photos: pip download --no-deps scikit-image -d "
                      + (search[0] if search else "DIR"))


def photos(wheel: str, names: Sequence[str]) -> list[np.ndarray]:
    """RGB uint8 images (grey ones repeated over three channels) from the wheel's skimage/data."""
    from PIL import Image

    out = []
    with zipfile.ZipFile(wheel) as z:
        for name in names:
            img = Image.open(io.BytesIO(z.read(f"skimage/data/{name}"))).convert("RGB")
            out.append(np.asarray(img))
    return out


def _font(size: int, k: int) -> Any:  # a PIL font
    from PIL import ImageFont

    path = os.path.join(FONT_DIR, FONTS[k % len(FONTS)])
    if not os.path.exists(path):
        raise MissingData(f"no DejaVu font at {path}: apt-get install fonts-dejavu-core")
    return ImageFont.truetype(path, size)


def text_lines(n: int, seed: int, words: tuple[int, int] = (2, 5)) -> list[tuple[str, np.ndarray]]:
    """``n`` (text, RGB image) pairs: a few words of the Zen of Python in a DejaVu face, dark ink
    on a light, slightly noisy background, tightly cropped with a margin."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        text = " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), int(rng.integers(*words))))
        font = _font(int(rng.integers(26, 40)), int(rng.integers(0, len(FONTS))))
        left, top, right, bottom = font.getbbox(text)
        ink = tuple(int(v) for v in rng.integers(0, 70, 3))
        paper = tuple(int(v) for v in rng.integers(190, 256, 3))
        img = Image.new("RGB", (right - left + 16, bottom - top + 12), paper)
        ImageDraw.Draw(img).text((8 - left, 6 - top), text, font=font, fill=ink)
        arr = np.asarray(img).astype(np.int16) + rng.integers(-12, 13, (img.height, img.width, 1))
        out.append((text, np.clip(arr, 0, 255).astype(np.uint8)))
    return out


def resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((width, height), Image.Resampling.BILINEAR))


def ocr_line(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """PaddleOCR's line preprocessing: resized to ``height`` keeping the aspect (at most
    ``width``), scaled to [-1, 1], right-padded with zeros; CHW float32."""
    w = min(width, max(1, round(img.shape[1] * height / img.shape[0])))
    x = resize(img, w, height).astype(np.float32) / 255.0
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :w] = ((x - 0.5) / 0.5).transpose(2, 0, 1)
    return out


def ocr_page(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """PaddleOCR's detector preprocessing at a fixed size: ImageNet mean and std; CHW float32."""
    x = resize(img, width, height).astype(np.float32) / np.float32(255.0)
    x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
    return x.transpose(2, 0, 1).astype(np.float32)


def paragraph(seed: int, width: int, height: int) -> np.ndarray:
    """A page of rendered text lines in mixed faces and sizes (for the text detector)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), (235, 235, 228))
    draw = ImageDraw.Draw(img)
    y = int(rng.integers(4, 20))
    while y < height - 20:
        size = int(rng.integers(12, 26))
        text = " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), int(rng.integers(2, 7))))
        draw.text((int(rng.integers(4, 40)), y), text, font=_font(size, int(rng.integers(0, len(FONTS)))),
                  fill=(20, 20, 30))
        y += size + int(rng.integers(6, 22))
    return np.asarray(img)


def letterbox(img: np.ndarray, size: int) -> np.ndarray:
    """YOLO preprocessing: the longer side scaled to ``size``, padded grey (114) to a square,
    RGB scaled to [0, 1]; CHW float32."""
    h, w = img.shape[:2]
    s = size / max(h, w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    out = np.full((size, size, 3), 114, np.uint8)
    top, left = (size - nh) // 2, (size - nw) // 2
    out[top:top + nh, left:left + nw] = resize(img, nw, nh)
    return (out.astype(np.float32) / 255.0).transpose(2, 0, 1)


def file_bytes(n: int, seed: int, beg: int = 1024, end: int = 1024, block: int = 4096, pad: int = 256
               ) -> list[tuple[str, np.ndarray]]:
    """``n`` files of the Python standard library (sources, data files of its tests: text, images,
    audio, archives, certificates) as magika's features: the first ``beg`` bytes of the first
    block and the last ``end`` of the last, whitespace stripped at the ends, padded with ``pad``."""
    lib = os.path.dirname(os.__file__)
    files = sorted(p for p in glob.glob(os.path.join(lib, "**", "*"), recursive=True)
                   if os.path.isfile(p) and os.path.getsize(p) >= 64 and "__pycache__" not in p
                   and "site-packages" not in p)
    by_ext: dict[str, list[str]] = {}
    for p in files:
        by_ext.setdefault(os.path.splitext(p)[1].lower() or "(none)", []).append(p)
    rng = np.random.default_rng(seed)
    exts = sorted(by_ext)
    rng.shuffle(exts)
    picked: list[str] = []
    while len(picked) < n and any(by_ext.values()):  # round robin over extensions: varied content types
        for e in exts:
            if by_ext[e] and len(picked) < n:
                picked.append(by_ext[e].pop(int(rng.integers(0, len(by_ext[e])))))
    out = []
    for p in picked:
        with open(p, "rb") as f:
            head = f.read(block)
            f.seek(max(0, os.path.getsize(p) - block))
            tail = f.read(block)
        head, tail = head.lstrip()[:beg], tail.rstrip()[-end:] if end else b""
        feat = np.full(beg + end, pad, np.int32)
        feat[:len(head)] = np.frombuffer(head, np.uint8)
        if tail:
            feat[beg + end - len(tail):] = np.frombuffer(tail, np.uint8)
        out.append((os.path.relpath(p, lib), feat))
    return out


if __name__ == "__main__":  # a look at what the makers make
    for text, img in text_lines(3, 0):
        print(repr(text), img.shape)
    for name, feat in file_bytes(8, 0):
        print(name, feat[:8])
    sys.exit(0)
