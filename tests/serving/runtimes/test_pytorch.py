"""PyTorch runtime: a tiny module trained on digits, scripted (TorchScript) and exported (torch.export)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from trimaran.serving.runtimes import InferenceInputError, ModelLoadError, TensorSpec, detect_format, load_model  # noqa: E402

pytestmark = pytest.mark.heavy


class Digits(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(64, 16)
        self.out = torch.nn.Linear(16, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(pixels)))


class TwoHeads(torch.nn.Module):
    """Two inputs, one of them fixed-size, and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(x) * scale, x.sum(1)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, torch.nn.Module]:
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    torch.manual_seed(0)
    model = Digits()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return x, model.eval()


def _script(module: torch.nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), str(path))


def test_torchscript(tmp_path: Path, digits: tuple) -> None:
    x, module = digits
    _script(module, tmp_path / "model.pt")

    assert detect_format(tmp_path) == "pytorch"
    model = load_model(tmp_path, name="digits")
    assert model.platform == "pytorch_torchscript"
    assert model.inputs == [TensorSpec("pixels", "FP32", (-1,))]
    assert [o.name for o in model.outputs] == ["output-0"]
    readonly = np.frombuffer(x[:40].tobytes(), dtype=np.float32).reshape(40, 64)  # as a server decodes a request
    with warnings.catch_warnings(action="error"):  # torch warns about non-writable arrays
        out = model.predict({"pixels": readonly})["output-0"]
    with torch.inference_mode():
        expected = module(torch.from_numpy(x[:40])).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert (out.argmax(1) == load_digits().target[:40]).mean() > 0.8  # it did learn
    with pytest.raises(InferenceInputError, match="no input 'x'"):
        model.predict({"x": x[:2]})
    assert torch.get_num_threads() == 1


def test_torchscript_tuple_outputs(tmp_path: Path) -> None:
    module = TwoHeads().eval()
    _script(module, tmp_path / "heads.pth")
    model = load_model(tmp_path / "heads.pth", name="heads", model_format="pytorch")
    assert [i.name for i in model.inputs] == ["x", "scale"]
    assert [o.name for o in model.outputs] == ["output-0", "output-1"]
    x, scale = np.arange(8, dtype=np.float32).reshape(2, 4), np.array([2.0], dtype=np.float32)
    out = model.predict({"x": x, "scale": scale})
    with torch.inference_mode():
        a, b = module(torch.from_numpy(x), torch.from_numpy(scale))
    np.testing.assert_allclose(out["output-0"], a.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(out["output-1"], b.numpy())
    assert set(model.predict({"x": x, "scale": scale}, outputs=["output-1"])) == {"output-1"}


def test_torch_export(tmp_path: Path, digits: tuple) -> None:
    x, module = digits
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (torch.from_numpy(x[:2]),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(tmp_path / "model.pt2"))

    assert detect_format(tmp_path) == "pytorch"
    model = load_model(tmp_path, name="digits")
    assert model.platform == "pytorch_torch_export"
    assert model.inputs == [TensorSpec("pixels", "FP32", (-1, 64))]
    assert model.outputs == [TensorSpec("output-0", "FP32", (-1, 10))]
    assert model.batchable
    out = model.predict({"pixels": x[:33].astype(np.float64)})["output-0"]  # cast to the exported float32
    with torch.inference_mode():
        np.testing.assert_allclose(out, module(torch.from_numpy(x[:33])).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(InferenceInputError, match=r"shape \[3, 8\]"):
        model.predict({"pixels": x[:3, :8]})


def test_export_with_a_fixed_input_is_not_batchable(tmp_path: Path) -> None:
    module = TwoHeads().eval()
    example = (torch.ones(2, 4), torch.ones(1))
    program = torch.export.export(module, example, dynamic_shapes=({0: torch.export.Dim("batch")}, None))
    torch.export.save(program, str(tmp_path / "heads.pt"))  # an export archive under the .pt suffix

    model = load_model(tmp_path, name="heads")
    assert model.platform == "pytorch_torch_export"
    assert model.inputs == [TensorSpec("x", "FP32", (-1, 4)), TensorSpec("scale", "FP32", (1,))]
    assert model.outputs == [TensorSpec("output-0", "FP32", (-1, 3)), TensorSpec("output-1", "FP32", (-1,))]
    assert not model.batchable


def test_state_dict_is_refused_with_advice(tmp_path: Path, digits: tuple) -> None:
    torch.save(digits[1].state_dict(), tmp_path / "model.pt")
    with pytest.raises(ModelLoadError, match=r"torch\.save pickle .* torch\.jit\.script\(model\)\.save"):
        load_model(tmp_path, name="m")


def test_corrupt_archive(tmp_path: Path) -> None:
    (tmp_path / "model.pt2").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ModelLoadError, match=r"model\.pt2 is not a PyTorch archive"):
        load_model(tmp_path, name="m")
