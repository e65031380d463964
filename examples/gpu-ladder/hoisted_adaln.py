"""Every DiT block's adaLN modulation for all the sampling loop's timesteps, computed once per generate.

diffusers' DiT (`norm_type="ada_norm_zero"`) computes in each of its blocks, and again for the final layer, a
modulation `Linear(SiLU(c))` of a conditioning `c = TimestepEmbedding(t) + LabelEmbedding(y)`: it depends on the
timestep and the class label only, never on the image tokens. Each denoiser pass runs these blocks + 1 GEMMs
again, each reading its whole weight (1152 x 6912 in DiT-XL/2) for the batch's few rows.

`HoistedAdaLN` computes them once per generate, for every (timestep of the schedule, class of the batch) pair:

* the timestep half of every block's conditioning for the S timesteps of the lane's schedule, once, when the
  pipeline is built (it depends on the schedule only);
* at `encode_labels`, on the host before the loop or its replay: for the batch's C distinct classes and the
  null class, every block's `Linear(SiLU(c))` of the S x C pairs as one batched GEMM over the blocks' stacked
  weights (the parameters' storage is that stack: the visible weights are the ones computed with), and the final
  layer's, written in place into a table [S, capacity, width] (the blocks' 6D columns, then the final 2D);
* each denoiser pass gathers its rows from that table on the device (the step from its timestep's value, the
  slot from its class: no host synchronisation) and hands each block its slice as the block's `timestep`; the
  block's norm (`Modulated`) only normalises and modulates.

The table and its two index maps are allocated once and only written in place, and the pipeline keeps them: a
CUDA graph that reads them (the hand graph of the denoiser, the sampling graph) reads them by address and sees
each generate's values. A timestep outside the schedule or a class this generate did not prepare maps to an
index past the table's end, so the gather fails (an IndexError on the CPU, a device-side assert on CUDA) instead
of reading another pair's row.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from diffusers.models.modeling_outputs import Transformer2DModelOutput

MIN_CAPACITY = 16  # class slots in the table beyond the null class, whatever the lane's batch


class Modulated(torch.nn.Module):
    """A block's AdaLayerNormZero given its [rows, 6D] modulation as `timestep`: the norm and the six chunks
    (diffusers' code after its linear). The original module stays inside, so its parameters stay visible."""

    def __init__(self, adaln: torch.nn.Module):
        super().__init__()
        self.adaln = adaln

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, class_labels: Any = None, hidden_dtype: Any = None,
                emb: Any = None) -> tuple[torch.Tensor, ...]:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = timestep.chunk(6, dim=1)
        x = self.adaln.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        return x, gate_msa, shift_mlp, scale_mlp, gate_mlp


def _stacked(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The parameters stacked into one tensor, each parameter's storage then being its slice of it."""
    stack = torch.stack([p.detach() for p in params])
    for param, view in zip(params, stack):
        param.data = view
    return stack


class HoistedAdaLN:
    """A DiTTransformer2DModel whose modulations come from a per-generate table (see the module docstring)."""

    def __init__(self, transformer: Any, timesteps: torch.Tensor, capacity: int):
        norms = [block.norm1 for block in transformer.transformer_blocks]
        embedders = [norm.emb for norm in norms]
        self.transformer, self.capacity = transformer, capacity
        self.device, dtype = transformer.device, norms[0].linear.weight.dtype
        with torch.no_grad():
            self.weight = _stacked([norm.linear.weight for norm in norms])  # [N, 6D, D]
            self.bias = _stacked([norm.linear.bias for norm in norms])  # [N, 6D]
            self.labels = _stacked([e.class_embedder.embedding_table.weight for e in embedders])  # [N, classes, D]
            steps = timesteps.to(self.device)
            self.time = torch.stack([e.timestep_embedder(e.time_proj(steps).to(dtype)) for e in embedders])
        self.blocks, self.width = len(norms), self.weight.shape[1]
        width = self.blocks * self.width + transformer.proj_out_1.out_features
        self.table = torch.zeros(len(steps), capacity, width, dtype=dtype, device=self.device)
        self.slot_of_class = torch.full((self.labels.shape[1],), capacity, dtype=torch.long, device=self.device)
        self.step_of_t = torch.full((int(steps.max()) + 1,), len(steps), dtype=torch.long, device=self.device)
        self.step_of_t[steps] = torch.arange(len(steps), device=self.device)
        for block in transformer.transformer_blocks:
            block.norm1 = Modulated(block.norm1)
        transformer.forward = self.forward

    @classmethod
    def for_pipeline(cls, transformer: Any, scheduler: Any, steps: int, batch: int) -> HoistedAdaLN | None:
        """The hoisted modulation of a DiT with adaLN-Zero blocks and integer timesteps, else None."""
        blocks = list(getattr(transformer, "transformer_blocks", []))
        if getattr(transformer.config, "norm_type", None) != "ada_norm_zero" or not blocks:
            return None
        if not hasattr(transformer, "proj_out_1") or any(
                getattr(b.norm1, "emb", None) is None or b.norm1.linear.bias is None for b in blocks):
            return None
        schedule = type(scheduler).from_config(scheduler.config)
        schedule.set_timesteps(steps)  # the loop's timesteps, without touching the pipeline's scheduler
        if schedule.timesteps.is_floating_point():
            return None
        classes = blocks[0].norm1.emb.class_embedder.embedding_table.num_embeddings
        return cls(transformer, schedule.timesteps, min(classes, max(batch, MIN_CAPACITY) + 1))

    @torch.no_grad()
    def prepare(self, classes: list[int]) -> None:
        """Write every block's and the final layer's modulation for these classes at every step into the table."""
        distinct = sorted(set(classes))
        if len(distinct) > self.capacity:
            raise ValueError(f"a generate with {len(distinct)} distinct classes (null class included), but the "
                             f"hoisted adaLN table holds {self.capacity}: build the pipeline with a larger batch")
        steps, count = self.table.shape[0], len(distinct)
        ids = torch.tensor(distinct, dtype=torch.long, device=self.device)
        conditioning = self.time[:, :, None] + self.labels[:, ids][:, None]  # [N, S, C, D], as diffusers adds them
        act = F.silu(conditioning).flatten(1, 2)  # [N, S*C, D]
        mods = torch.baddbmm(self.bias[:, None], act, self.weight.transpose(1, 2))  # [N, S*C, 6D]
        final = F.linear(act[0], self.transformer.proj_out_1.weight, self.transformer.proj_out_1.bias)
        split = self.blocks * self.width
        self.table[:, :count, :split].unflatten(2, (self.blocks, self.width)).copy_(
            mods.unflatten(1, (steps, count)).permute(1, 2, 0, 3))
        self.table[:, :count, split:].copy_(final.unflatten(0, (steps, count)))
        self.slot_of_class.fill_(self.capacity)
        self.slot_of_class[ids] = torch.arange(count, device=self.device)

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor | None = None,
                class_labels: torch.Tensor | None = None, cross_attention_kwargs: dict | None = None,
                return_dict: bool = True) -> Any:
        """DiTTransformer2DModel.forward with each block's modulation read from the table."""
        model = self.transformer
        mods = self.table[self.step_of_t[timestep], self.slot_of_class[class_labels]]  # [rows, width]
        hidden_states = model.pos_embed(hidden_states)
        for i, block in enumerate(model.transformer_blocks):
            hidden_states = block(hidden_states, attention_mask=None, encoder_hidden_states=None,
                                  encoder_attention_mask=None, timestep=mods[:, i * self.width:(i + 1) * self.width],
                                  cross_attention_kwargs=cross_attention_kwargs, class_labels=None)
        shift, scale = mods[:, self.blocks * self.width:].chunk(2, dim=1)
        hidden_states = model.norm_out(hidden_states) * (1 + scale[:, None]) + shift[:, None]
        hidden_states = model.proj_out_2(hidden_states)
        height = width = int(hidden_states.shape[1] ** 0.5)  # unpatchify, as diffusers does
        hidden_states = hidden_states.reshape(
            shape=(-1, height, width, model.patch_size, model.patch_size, model.out_channels))
        hidden_states = torch.einsum("nhwpqc->nchpwq", hidden_states)
        output = hidden_states.reshape(
            shape=(-1, model.out_channels, height * model.patch_size, width * model.patch_size))
        return Transformer2DModelOutput(sample=output) if return_dict else (output,)
