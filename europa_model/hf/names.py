"""Which Hugging Face tensors a torchtitan checkpoint becomes, planned from shapes alone (no weights read).

The names and the split of grouped routed experts come from torchtitan's own `DeepSeekV3StateDictAdapter`
(the adapter `europa_model.flavors.model_registry` registers), applied to meta tensors: one mapping for
training, torchtitan's HF loading and this export, so they cannot disagree. What this module adds is the
check the adapter does not make: the checkpoint must hold exactly the model's persistent state (names and
shapes of the flavor at this vocabulary), so a key we do not know is refused by name instead of being
dropped or guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

__all__ = ["ExportPlanError", "HFTensor", "TRAINING_STATE_PREFIXES", "adapter_for", "model_state_shapes", "plan"]


class ExportPlanError(ValueError):
    """A checkpoint whose keys or shapes do not fit the flavor; the message names the key."""


def _training_state_prefixes() -> tuple[str, ...]:
    # torchtitan's CheckpointManager stores the model flat and everything else under these state names.
    from torchtitan.components.checkpoint import DATALOADER, LR_SCHEDULER, OPTIMIZER, TRAIN_STATE

    return tuple(f"{name}." for name in (OPTIMIZER, LR_SCHEDULER, DATALOADER, TRAIN_STATE))


TRAINING_STATE_PREFIXES = _training_state_prefixes()


@dataclass(frozen=True)
class HFTensor:
    name: str                # the Hugging Face key
    source: str              # the checkpoint key it is cut from
    shape: tuple[int, ...]
    dtype: torch.dtype       # as written
    parameter: bool          # False for saved buffers (the routers' expert bias)

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape)


def adapter_for(model_config):
    from torchtitan.models.deepseek_v3.state_dict_adapter import DeepSeekV3StateDictAdapter

    return DeepSeekV3StateDictAdapter(model_config, None)


def model_state_shapes(model_config) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The persistent state (parameters and saved buffers such as the routers' expert bias) of the model,
    in the model's own order, from an instance on the meta device; and which of its keys are parameters."""
    with torch.device("meta"):
        model = model_config.build()
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, {k for k, _ in model.named_parameters()}


def _keep_fp32_patterns() -> list[re.Pattern]:
    # transformers loads these modules in fp32 whatever the checkpoint dtype; writing them in bf16 would
    # only round the router's weights for nothing.
    from transformers import DeepseekV3ForCausalLM

    names = DeepseekV3ForCausalLM._keep_in_fp32_modules_strict or []
    return [re.compile(rf"(^|\.){re.escape(n)}(\.|$)") for n in names]


def plan(model_config, stored: dict[str, tuple[int, ...]], *, dtype: torch.dtype, where: str) -> list[HFTensor]:
    """The HF tensors, in the model's order, for a checkpoint whose model tensors have the shapes `stored`
    (training-state keys already removed). `where` names the checkpoint in messages."""
    expected, parameters = model_state_shapes(model_config)
    unknown = [k for k in stored if k not in expected]
    if unknown:
        raise ExportPlanError(
            f"{where}: key {unknown[0]!r} is not part of this model ({len(unknown)} such keys); the export maps "
            f"the {len(expected)} tensors of the flavor it was given: check the flavor, or teach "
            "europa_model/hf/names.py the new tensor")
    missing = [k for k in expected if k not in stored]
    if missing:
        raise ExportPlanError(f"{where}: lacks model tensor {missing[0]!r} ({len(missing)} missing); it does not hold "
                              "this flavor's model, or it was saved without it")
    for k, shape in expected.items():
        if tuple(stored[k]) != shape:
            raise ExportPlanError(f"{where}: tensor {k!r} has shape {tuple(stored[k])}, the flavor expects {shape}; "
                                  "the flavor or vocab_size given to the export differs from the training run's")

    adapter = adapter_for(model_config)
    keep_fp32 = _keep_fp32_patterns()
    out: list[HFTensor] = []
    seen: set[str] = set()
    for key, shape in expected.items():
        try:
            hf = adapter.to_hf({key: torch.empty(shape, device="meta")})
        except (KeyError, AttributeError) as e:  # the adapter's map has no entry for this kind of tensor
            raise ExportPlanError(f"{where}: tensor {key!r} has no Hugging Face name in torchtitan's DeepSeek-V3 "
                                  f"adapter ({type(e).__name__}: {e}); teach europa_model/hf/names.py") from None
        for name, t in hf.items():
            if name in seen:
                raise ExportPlanError(f"{where}: two tensors map to the Hugging Face key {name!r}")
            seen.add(name)
            fp32 = any(p.search(name) for p in keep_fp32)
            out.append(HFTensor(name=name, source=key, shape=tuple(t.shape), dtype=torch.float32 if fp32 else dtype,
                                parameter=key in parameters))
    return out
