"""Which lane runs, and on which device: one rule for the name, one for the device (no GPU needed)."""

from __future__ import annotations

import dataclasses

import pytest

from dit_ar_contract import device
from dit_ar_contract.config import load_config
from dit_ar_contract.device import DeviceIdentity, Gpu
from dit_ar_contract.errors import ConfigError
from tests.helpers.loop import PROJECT

CONFIG = load_config(PROJECT / "config" / "autoresearch.json")
A5500 = Gpu(0, "NVIDIA RTX A5500", "GPU-aaaa", "8.6", 24.0, "580.1")
H200 = Gpu(1, "NVIDIA H200", "GPU-hhhh", "9.0", 140.0, "580.1")


@pytest.mark.parametrize("explicit,session,expected", [
    (None, None, "embedded-cpu"),            # the config's default
    (None, "dit-xl2-256", "dit-xl2-256"),     # the session's lane
    ("pixart-sigma-1024", "dit-xl2-256", "pixart-sigma-1024"),  # an explicit choice wins
])
def test_lane_name_rule(explicit, session, expected) -> None:
    assert CONFIG.lane_name(explicit, session) == expected


def test_an_unknown_lane_is_a_config_error_listing_the_lanes() -> None:
    with pytest.raises(ConfigError, match="one of the lanes"):
        CONFIG.lane_name("nope")


def test_cpu_lane_runs_anywhere_as_itself() -> None:
    target = device.resolve_lane(CONFIG, CONFIG.lanes["embedded-cpu"], gpus=[])
    assert target.runnable and target.lane_id == "embedded-cpu" and target.identity.kind == "cpu"


def test_gpu_lane_without_a_gpu_cannot_run_and_says_why() -> None:
    target = device.resolve_lane(CONFIG, CONFIG.lanes["dit-xl2-256"], gpus=[])
    assert not target.runnable and "no CUDA GPU" in target.problem


def test_target_gpu_is_preferred_and_keeps_the_lane_name() -> None:
    target = device.resolve_lane(CONFIG, CONFIG.lanes["dit-xl2-256"], gpus=[H200, A5500])
    assert target.on_target and target.lane_id == "dit-xl2-256" and target.identity.uuid == "GPU-aaaa"
    assert target.env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa"


def test_a_foreign_gpu_is_a_labelled_lane_with_a_memory_cap() -> None:
    target = device.resolve_lane(CONFIG, CONFIG.lanes["dit-xl2-256"], gpus=[H200])
    assert not target.on_target and target.lane_id == "dit-xl2-256@nvidia-h200"
    assert target.memory_cap_gb == 24  # the lane's VRAM budget holds on a larger card


def test_foreign_lanes_can_be_refused() -> None:
    strict = dataclasses.replace(CONFIG, target=dataclasses.replace(CONFIG.target, allow_foreign_lanes=False))
    target = device.resolve_lane(strict, strict.lanes["dit-xl2-256"], gpus=[H200])
    assert not target.runnable and "allow_foreign_lanes" in target.problem


def test_cuda_visible_devices_filters_and_orders_gpus() -> None:
    assert device.visible([A5500, H200], "1") == [H200]
    assert device.visible([A5500, H200], "GPU-hh,0") == [H200, A5500]
    assert device.visible([A5500, H200], "7,0") == []  # CUDA stops at the first invalid entry


def test_identity_round_trip_and_same_device() -> None:
    gpu = DeviceIdentity("cuda", "NVIDIA RTX A5500", "GPU-aaaa", "8.6", 24.0, "580.1")
    assert DeviceIdentity.from_dict(gpu.as_dict()) == gpu
    assert gpu.same_device(DeviceIdentity("cuda", "another name", "GPU-aaaa"))
    assert not gpu.same_device(DeviceIdentity("cuda", "NVIDIA RTX A5500", "GPU-bbbb"))
    cpu = DeviceIdentity("cpu", "Some CPU")
    assert cpu.same_device(DeviceIdentity("cpu", "Some CPU")) and not cpu.same_device(gpu)


A5500_B = Gpu(2, "NVIDIA RTX A5500", "GPU-bbbb", "8.6", 24.0, "580.1")
H200_B = Gpu(3, "NVIDIA H200", "GPU-iiii", "9.0", 140.0, "580.1")
TWO = dataclasses.replace(CONFIG.lanes["dit-xl2-256"], name="cfg-parallel", device="cuda", gpus=2)


def test_a_two_gpu_lane_shows_its_worker_both_target_gpus() -> None:
    target = device.resolve_lane(CONFIG, TWO, gpus=[H200, A5500, A5500_B])
    assert target.on_target and target.lane_id == "cfg-parallel"
    assert target.env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb" == target.identity.uuid


def test_a_two_gpu_lane_on_foreign_gpus_is_labelled_and_one_gpu_is_not_enough() -> None:
    foreign = device.resolve_lane(CONFIG, TWO, gpus=[H200, H200_B])
    assert not foreign.on_target and foreign.lane_id == "cfg-parallel@nvidia-h200"
    assert foreign.env["CUDA_VISIBLE_DEVICES"] == "GPU-hhhh,GPU-iiii"
    alone = device.resolve_lane(CONFIG, TWO, gpus=[A5500])
    assert not alone.runnable and "needs 2 GPUs and 1 are visible" in alone.problem
