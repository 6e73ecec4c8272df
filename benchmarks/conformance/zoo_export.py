"""Exporters of the model zoo (``model_zoo.py``): one real model per name, written as ONNX.

Runs in the zoo's own export venv (torch, torchvision, transformers, skl2onnx, onnxruntime), never
in the project's; ``model_zoo.py`` calls it once per model in a subprocess:

    ZOO_VENV/bin/python benchmarks/conformance/zoo_export.py NAME OUT.onnx
    ZOO_VENV/bin/python benchmarks/conformance/zoo_export.py --list

No weights are downloaded: torchvision models are built with ``weights=None`` (and
``weights_backbone=None``), transformers models from small configs, scikit-learn models are
fitted on seeded random data. Dynamic dims are named ``batch``, ``sequence``, ``past_sequence``
and ``total_sequence``; ``model_zoo.py`` turns those names into run shapes."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

OPSET = 17
IMAGE = 224

EXPORTERS: dict[str, Callable[[str], None]] = {}


def exporter(name: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(fn: Callable[[str], None]) -> Callable[[str], None]:
        EXPORTERS[name] = fn
        return fn
    return register


def _torch() -> Any:
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(2)
    # nn.MultiheadAttention's inference fast path (aten::_native_multi_head_attention) has no
    # ONNX export; the plain path exports as MatMul/Softmax.
    torch.backends.mha.set_fastpath_enabled(False)
    return torch


def torch_export(model: Any, args: tuple[Any, ...], out: str, input_names: list[str], output_names: list[str],
                 dynamic_axes: dict[str, dict[int, str]] | None = None) -> None:
    """``torch.onnx.export`` at opset 17 with the TorchScript exporter (dynamo=False): the dynamo
    exporter needs static-shape hints for these models and is slower on two cores."""
    torch = _torch()
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, args, out, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes or {}, do_constant_folding=True,
                          dynamo=False)


def _image_batch(size: int = IMAGE, batch: int = 1) -> Any:
    return _torch().rand(batch, 3, size, size)


# ---- torchvision classification -----------------------------------------------------------

def _classifier(build: Callable[[], Any], size: int = IMAGE) -> Callable[[str], None]:
    def export(out: str) -> None:
        _torch()
        torch_export(build(), (_image_batch(size),), out, ["x"], ["logits"],
                     {"x": {0: "batch"}, "logits": {0: "batch"}})
    return export


def _tv(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kwargs)
    return build


def _tiny_vit() -> Any:
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=96, patch_size=16, num_layers=4, num_heads=4, hidden_dim=192,
                             mlp_dim=768, num_classes=100)


for _name in ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny"):
    exporter(_name)(_classifier(_tv(_name)))
exporter("vit_tiny")(_classifier(_tiny_vit, size=96))
exporter("resnet50")(_classifier(_tv("resnet50")))  # (the precision study's; not in the zoo table)


def _tiny_vit_head() -> Any:
    """vit_tiny with a random head: torchvision zero-initialises it, so every logit is 0 and a
    precision study of top-1 agreement would measure nothing."""
    torch = _torch()
    model = _tiny_vit()
    torch.manual_seed(0)
    torch.nn.init.normal_(model.heads.head.weight, std=0.05)
    return model


exporter("vit_tiny_head")(_classifier(_tiny_vit_head, size=96))


# ---- torchvision segmentation -------------------------------------------------------------

def _segmentation_out(model: Any) -> Any:
    """A torchvision segmentation model that returns its ``out`` tensor (not a dict)."""
    _torch()
    import torch  # the module by name: the classes below subclass torch.nn.Module

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: Any) -> Any:
            return self.model(x)["out"]
    return Wrapped()


def _segmenter(name: str) -> Callable[[str], None]:
    def export(out: str) -> None:
        import torchvision
        model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, num_classes=21)
        torch_export(_segmentation_out(model), (_image_batch(256),), out, ["x"], ["out"],
                     {"x": {0: "batch"}, "out": {0: "batch"}})
    return export


for _name in ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"):
    exporter(_name)(_segmenter(_name))


# ---- torchvision detection at 320x320 -------------------------------------------------------

def _detector(name: str) -> Callable[[str], None]:
    """Torchvision detectors take a list of images: the export has one input ``x`` of shape
    3x320x320 and returns the first image's result tensors (boxes, scores, labels, masks or
    keypoints where the model has them)."""
    def export(out: str) -> None:
        _torch()
        import torch  # the module by name: the classes below subclass torch.nn.Module
        import torchvision
        kwargs: dict[str, Any] = {"weights": None, "weights_backbone": None}
        if name != "ssdlite320_mobilenet_v3_large":
            kwargs.update(min_size=320, max_size=320)
        if name == "keypointrcnn_resnet50_fpn":
            kwargs["num_classes"] = 2
        elif name != "ssdlite320_mobilenet_v3_large":
            kwargs["num_classes"] = 91
        model = getattr(torchvision.models.detection, name)(**kwargs)
        keys = ["boxes", "scores", "labels"] + (["masks"] if "mask" in name else []) + \
            (["keypoints", "keypoints_scores"] if "keypoint" in name else [])

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, x: Any) -> Any:
                result = self.model([x])[0]
                return tuple(result[k] for k in keys)
        torch_export(Wrapped(), (torch.rand(3, 320, 320),), out, ["x"], keys)
    return export


for _name in ("fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large",
              "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn", "fcos_resnet50_fpn"):
    exporter(_name)(_detector(_name))


# ---- transformers (small configs, random weights) -----------------------------------------

TEXT_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


def _text_encoder(make: Callable[[], Any], names: list[str], outputs: list[str]) -> Callable[[str], None]:
    def export(out: str) -> None:
        _torch()
        import torch  # the module by name: the classes below subclass torch.nn.Module
        model = make()

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                result = self.model(**dict(zip(names, args)))
                return tuple(result[k] for k in outputs)
        ids = torch.randint(0, 100, (2, 16))
        feeds = {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.int64),
                 "token_type_ids": torch.zeros(2, 16, dtype=torch.int64)}
        axes = {n: {0: "batch", 1: "sequence"} for n in names}
        axes.update({o: {0: "batch", 1: "sequence"} for o in outputs if o != "pooler_output"})
        torch_export(Wrapped(), tuple(feeds[n] for n in names), out, names, outputs, axes)
    return export


def _bert() -> Any:
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=512, max_position_embeddings=128, attn_implementation="eager"))


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel
    return DistilBertModel(DistilBertConfig(vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=512,
                                            max_position_embeddings=128, attn_implementation="eager"))


def _t5_encoder() -> Any:
    from transformers import T5Config, T5EncoderModel
    return T5EncoderModel(T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4,
                                   attn_implementation="eager"))


def _clip_text() -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel
    return CLIPTextModel(CLIPTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=77,
                                        attn_implementation="eager"))


exporter("bert")(_text_encoder(_bert, ["input_ids", "attention_mask", "token_type_ids"],
                               ["last_hidden_state", "pooler_output"]))
exporter("distilbert")(_text_encoder(_distilbert, ["input_ids", "attention_mask"], ["last_hidden_state"]))
exporter("t5_encoder")(_text_encoder(_t5_encoder, ["input_ids", "attention_mask"], ["last_hidden_state"]))
exporter("clip_text")(_text_encoder(_clip_text, ["input_ids", "attention_mask"],
                                    ["last_hidden_state", "pooler_output"]))


@exporter("clip_vision")
def _clip_vision(out: str) -> None:
    _torch()
    import torch  # the module by name: the classes below subclass torch.nn.Module
    from transformers import CLIPVisionConfig, CLIPVisionModel
    model = CLIPVisionModel(CLIPVisionConfig(hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                                             num_attention_heads=4, image_size=64, patch_size=16,
                                             attn_implementation="eager"))

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            result = self.model(pixel_values=pixel_values)
            return result.last_hidden_state, result.pooler_output
    torch_export(Wrapped(), (torch.rand(2, 3, 64, 64),), out, ["pixel_values"], ["last_hidden_state", "pooler_output"],
                 {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}, "pooler_output": {0: "batch"}})


@exporter("whisper_encoder")
def _whisper_encoder(out: str) -> None:
    _torch()
    import torch  # the module by name: the classes below subclass torch.nn.Module
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    config = WhisperConfig(vocab_size=1000, num_mel_bins=80, d_model=128, encoder_layers=2, encoder_attention_heads=4,
                           decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
                           max_source_positions=100, max_target_positions=64, attn_implementation="eager")
    model = WhisperEncoder(config)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_features: Any) -> Any:
            return self.model(input_features=input_features).last_hidden_state
    # Whisper's encoder takes exactly 2 * max_source_positions frames.
    torch_export(Wrapped(), (torch.rand(2, 80, 200),), out, ["input_features"], ["last_hidden_state"],
                 {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})


@exporter("gpt2_with_past")
def _gpt2_with_past(out: str) -> None:
    """GPT-2 decoding step with a key/value cache: inputs ``input_ids``, ``attention_mask``
    (past + new tokens) and ``past_key_<i>``/``past_value_<i>``; outputs logits and the presents."""
    _torch()
    import torch  # the module by name: the classes below subclass torch.nn.Module
    from transformers import GPT2Config, GPT2LMHeadModel
    layers, heads, dim = 2, 4, 128
    model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_positions=128, n_embd=dim, n_layer=layers, n_head=heads,
                                       attn_implementation="eager"))

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            from transformers.cache_utils import DynamicCache
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            result = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                                use_cache=True)
            present = result.past_key_values
            flat: list[Any] = []
            for i in range(layers):
                if hasattr(present, "layers"):
                    flat += [present.layers[i].keys, present.layers[i].values]
                else:
                    flat += [present.key_cache[i], present.value_cache[i]]
            return (result.logits, *flat)
    past_len, seq = 8, 16
    past = [torch.rand(2, heads, past_len, dim // heads) for _ in range(2 * layers)]
    past_names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    present_names = [f"present_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "sequence"},
                                       "attention_mask": {0: "batch", 1: "total_sequence"},
                                       "logits": {0: "batch", 1: "sequence"}}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in past_names})
    axes.update({n: {0: "batch", 2: "total_sequence"} for n in present_names})
    torch_export(Wrapped(), (torch.randint(0, 100, (2, seq)), torch.ones(2, past_len + seq, dtype=torch.int64), *past),
                 out, ["input_ids", "attention_mask", *past_names], ["logits", *present_names], axes)


# ---- scikit-learn pipelines through skl2onnx ------------------------------------------------

def _sklearn(make: Callable[[], Any]) -> Callable[[str], None]:
    def export(out: str) -> None:
        import numpy as np
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
        rng = np.random.default_rng(0)
        x = rng.standard_normal((300, 20)).astype(np.float32)
        y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1).astype(np.int64)
        model = make().fit(x, y)
        onx = to_onnx(model, initial_types=[("input", FloatTensorType([None, 20]))],
                      options={"zipmap": False}, target_opset={"": OPSET, "ai.onnx.ml": 3})
        with open(out, "wb") as f:
            f.write(onx.SerializeToString())
    return export


def _scaler_mlp() -> Any:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64, 32), max_iter=300, random_state=0))


def _scaler_logreg() -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))


def _random_forest() -> Any:
    from sklearn.ensemble import RandomForestClassifier
    return RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0)


def _gradient_boosting() -> Any:
    from sklearn.ensemble import GradientBoostingClassifier
    return GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0)


exporter("skl_scaler_mlp")(_sklearn(_scaler_mlp))
exporter("skl_scaler_logreg")(_sklearn(_scaler_logreg))
exporter("skl_random_forest")(_sklearn(_random_forest))
exporter("skl_gradient_boosting")(_sklearn(_gradient_boosting))


# ---- quantized (Q/DQ) and fp16 CNNs -----------------------------------------------------------

def _small_cnn_fp32(out: str, size: int = 128) -> None:
    """resnet18 at a fixed 1x3xSIZExSIZE: the base of the Q/DQ and fp16 models."""
    import torchvision
    torch_export(torchvision.models.resnet18(weights=None), (_image_batch(size),), out, ["x"], ["logits"])


def _quantized(trt_friendly: bool) -> Callable[[str], None]:
    def export(out: str) -> None:
        import numpy as np
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process
        base, pre = out + ".fp32.onnx", out + ".pre.onnx"
        _small_cnn_fp32(base)
        quant_pre_process(base, pre, skip_symbolic_shape=True)

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self.feeds = iter([{"x": rng.random((1, 3, 128, 128), dtype=np.float32)} for _ in range(8)])

            def get_next(self) -> dict[str, Any] | None:
                return next(self.feeds, None)
        if trt_friendly:
            quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
        else:
            quantize_static(pre, out, Reader())
        for path in (base, pre):
            os.remove(path)
    return export


exporter("qdq_resnet18_default")(_quantized(False))
exporter("qdq_resnet18_trt")(_quantized(True))


@exporter("fp16_resnet18")
def _fp16_resnet18(out: str) -> None:
    """``model.half()`` exported; where half convolutions do not trace on this CPU, the fp32
    export converted by onnxruntime's float16 converter (its inputs and outputs fp16 too)."""
    import torchvision
    model = torchvision.models.resnet18(weights=None).eval().half()
    try:
        torch_export(model, (_image_batch(128).half(),), out, ["x"], ["logits"])
        return
    except Exception as e:  # noqa: BLE001 - any failure of the half trace falls back to conversion
        print(f"model.half() export failed ({type(e).__name__}: {e}); converting the fp32 export", file=sys.stderr)
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16
    _small_cnn_fp32(out)
    onnx.save(convert_float_to_float16(onnx.load(out), keep_io_types=False), out)


# ---- control flow -------------------------------------------------------------------------

@exporter("scripted_loop_if")
def _scripted_loop_if(out: str) -> None:
    """A scripted module whose loop count and branch depend on the data: Loop and If nodes."""
    _torch()
    import torch  # the module by name: the classes below subclass torch.nn.Module

    class Body(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.head = torch.nn.Linear(8, 10)

        def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            h = x
            for _ in range(int(steps.item())):
                h = torch.relu(self.conv(h)) + h
            if h.mean() > 0.5:
                h = h * 0.5
            else:
                h = h - 0.25
            return self.head(h.mean(dim=(2, 3)))

    scripted = torch.jit.script(Body())
    torch_export(scripted, (torch.rand(1, 8, 32, 32), torch.tensor(3)), out, ["x", "steps"], ["logits"],
                 {"x": {0: "batch"}, "logits": {0: "batch"}})


# ---- PyTorch's dynamo exporter ------------------------------------------------------------

def dynamo_export(model: Any, args: tuple[Any, ...], out: str, input_names: list[str],
                  dynamic: dict[str, dict[int, str]]) -> None:
    """``torch.onnx.export`` with the dynamo exporter, PyTorch's default since 2.9, as a user who
    passes nothing else gets it: its own opset, its graph optimisations, and the weights in an
    external data file beside the model (named after ``out`` less a ``.part`` suffix).
    ``dynamic``: input -> {axis: dim name}, the same name for the same size."""
    torch = _torch()
    import tempfile

    import onnx
    dims: dict[str, Any] = {}
    shapes = {n: {a: dims.setdefault(d, torch.export.Dim(d, min=1, max=512)) for a, d in axes.items()}
              for n, axes in dynamic.items()}
    model.eval()
    final = out[:-len(".part")] if out.endswith(".part") else out
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        first = os.path.join(tmp, "model.onnx")
        torch.onnx.export(model, args, first, input_names=input_names,
                          dynamic_shapes=tuple(shapes.get(n, {}) for n in input_names), dynamo=True)
        onnx.save(onnx.load(first), out, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(final) + ".data")


@exporter("resnet18_dynamo")
def _resnet18_dynamo(out: str) -> None:
    _torch()
    dynamo_export(_tv("resnet18")(), (_image_batch(),), out, ["x"], {"x": {0: "batch"}})


@exporter("bert_dynamo")
def _bert_dynamo(out: str) -> None:
    torch = _torch()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    args = (torch.randint(0, 100, (2, 16)), torch.ones(2, 16, dtype=torch.int64), torch.zeros(2, 16, dtype=torch.int64))
    dynamo_export(_bert(), args, out, names, {n: {0: "batch", 1: "sequence"} for n in names})


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list"]:
        print("\n".join(EXPORTERS))
        return 0
    if len(argv) != 2 or argv[0] not in EXPORTERS:
        print(f"usage: zoo_export.py --list | NAME OUT.onnx (NAME one of {', '.join(EXPORTERS)})", file=sys.stderr)
        return 2
    name, out = argv
    tmp = out + ".part"
    EXPORTERS[name](tmp)
    import onnx
    onnx.checker.check_model(tmp)  # a model the exporter wrote but onnx rejects is a failed export
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
