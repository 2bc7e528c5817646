"""torchcodec as the sampler's optional decoder (`decoder: torchcodec`): real mp4s written with PyAV
(constant rate H.264 and MPEG-4, VFR, B-frames, open GOP, a stream starting at 10 s, odd file
names) sample to the same frames as the PyAV path (np.array_equal at the original size, the same
times, masks and rates); resized frames keep the geometry and differ by rounding only; a corrupt file
is a `VideoDecodeError` naming it; a missing torchcodec or FFmpeg ends in one line saying what to
install. Needs torchcodec and FFmpeg's shared libraries (the dev extra and `.ci/run` install them):
without them the decoding tests skip, or fail under CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.media import torchcodec_or_skip, write_noise_video, write_shots_video, write_timed_video
from lit_retrieval.data.media.torchcodec_decoder import FFMPEG_PACKAGES, frames_played_at
from lit_retrieval.data.media.video import SamplingSpec, VideoDecodeError, sample_frames, video_duration
from lit_retrieval.errors import ConfigError, input_error_line

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def torchcodec_ready() -> None:
    """Skip without torchcodec or FFmpeg's libraries; under CI fail instead."""
    torchcodec_or_skip()


def vfr_pts(count: int, seed: int) -> list[int]:
    """Milliseconds with irregular gaps (33 ms to 2.5 s)."""
    gaps = np.random.default_rng(seed).choice([33, 100, 400, 2500], size=count - 1, p=[0.4, 0.3, 0.2, 0.1])
    return [0] + np.cumsum(gaps).astype(int).tolist()


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("torchcodec_videos")
    made = {
        "vfr": write_timed_video(folder / "vfr.mp4", vfr_pts(60, 0), gop=12),
        "vfr_bframes": write_timed_video(folder / "vfr_b.mp4", vfr_pts(60, 1), gop=12, bframes=2),
        "offset_10s": write_timed_video(folder / "offset.mp4", [10_000 + 100 * k for k in range(50)], bframes=2),
        "bframes": write_timed_video(folder / "b.mp4", [40 * k for k in range(72)], gop=12, bframes=3),
        "open_gop": write_timed_video(folder / "open.mp4", [40 * k for k in range(72)], bframes=3, open_gop=True),
        "mpeg4_noise": write_noise_video(folder / "noise.mp4", 3.0, width=64, height=48),
    }
    write_shots_video(folder / "shots.mp4", [10, 20], 30, size=48)  # constant 10 fps H.264
    made["h264_constant"] = folder / "shots.mp4"
    for name in ["café clip #1 [50%].mp4", "a:b.mp4", os.fsdecode(b"caf\xe9 \xff\xfe clip.mp4")]:
        shutil.copyfile(made["vfr_bframes"], folder / name)  # `:` reads as a protocol, the last name is not UTF-8
        made[f"name {name!r}"] = folder / name
    return made


SAMPLINGS = {  # windows as fractions of the video's span
    "bin centres": dict(num_frames=16),
    "window": dict(num_frames=7, start=0.3, end=0.8),
    "more targets than frames": dict(num_frames=96),
    "linspace_frames": dict(num_frames=8, targets="linspace_frames", frame_multiple=2),
    "linspace window": dict(num_frames=6, start=0.2, end=0.9, targets="linspace_frames"),
}


def sampling(path: Path, how: str) -> dict:
    settings = dict(SAMPLINGS[how])
    span = video_duration(path)
    for key in ("start", "end"):
        if key in settings:
            settings[key] *= span
    return settings


def assert_same_sample(ours, theirs, exact_pixels: bool = True) -> None:
    assert ours.mask.tolist() == theirs.mask.tolist()
    np.testing.assert_allclose(ours.times, theirs.times, atol=1e-9)  # NaN where padded, in both
    assert ours.sampled_fps == pytest.approx(theirs.sampled_fps, rel=1e-12)
    assert ours.frames.shape == theirs.frames.shape
    if exact_pixels:
        assert np.array_equal(ours.frames, theirs.frames)


STREAMS = ["vfr", "vfr_bframes", "offset_10s", "bframes", "open_gop", "mpeg4_noise", "h264_constant"]


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("how", list(SAMPLINGS))
def test_torchcodec_samples_the_frames_pyav_samples(torchcodec_ready, videos, name, how):
    settings = sampling(videos[name], how)
    pyav = sample_frames(videos[name], **settings)
    torchcodec = sample_frames(videos[name], decoder="torchcodec", **settings)
    assert pyav.mask.any()
    assert_same_sample(torchcodec, pyav)


def test_odd_file_names_decode(torchcodec_ready, videos):
    reference = sample_frames(videos["vfr_bframes"], 12)
    for key in [k for k in videos if k.startswith("name ")]:
        assert_same_sample(sample_frames(videos[key], 12, decoder="torchcodec"), reference)


@pytest.mark.parametrize("name", ["vfr", "bframes", "offset_10s"])
def test_resized_frames_keep_the_geometry_and_differ_by_rounding(torchcodec_ready, videos, name):
    """torchcodec resizes the RGB frame, PyAV the YUV frame while converting: the same times and
    crop; pixels within a few levels on these smooth gradients (measured: mean 0.7-1.6, the largest
    differences on the hard edge where the gradient wraps)."""
    for size in (16, 24):
        pyav = sample_frames(videos[name], 8, size=size)
        torchcodec = sample_frames(videos[name], 8, size=size, decoder="torchcodec")
        assert_same_sample(torchcodec, pyav, exact_pixels=False)
        assert torchcodec.frames.shape[1:] == (size, size, 3)
        difference = np.abs(torchcodec.frames.astype(int) - pyav.frames.astype(int))
        assert difference.mean() < 2.5 and np.median(difference) <= 2


def test_corrupt_files_are_decode_errors_naming_them(torchcodec_ready, videos, tmp_path):
    garbage = tmp_path / "garbage clip.mp4"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(VideoDecodeError, match="garbage clip.mp4: undecodable"):
        sample_frames(garbage, 4, decoder="torchcodec")
    with pytest.raises(VideoDecodeError, match=r"garbage clip.mp4: undecodable \(torchcodec: "):
        frames_played_at(garbage, np.array([0.5]), None)  # torchcodec's own error, not PyAV's probe
    data = videos["bframes"].read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="cut.mp4: "):
        sample_frames(cut, 8, decoder="torchcodec")


def test_keyframe_sampling_and_unknown_decoders_are_refused():
    with pytest.raises(ConfigError, match="decoder 'torchcodec' samples exact frames"):
        SamplingSpec(4, sampling="keyframe", decoder="torchcodec")
    with pytest.raises(ConfigError, match="decoder must be one of 'pyav', 'torchcodec', got 'opencv'"):
        SamplingSpec(4, decoder="opencv")


def hide_torchcodec(monkeypatch) -> None:
    """`import torchcodec` fails, as where the extra is not installed (None in sys.modules: ImportError)."""
    for name in [m for m in sys.modules if m == "torchcodec" or m.startswith("torchcodec.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)


def test_a_missing_torchcodec_is_one_line_saying_what_to_install(monkeypatch, tmp_path):
    video = write_noise_video(tmp_path / "v.mp4", 1.0)
    hide_torchcodec(monkeypatch)
    with pytest.raises(ConfigError) as refused:
        sample_frames(video, 4, decoder="torchcodec")
    message = str(refused.value)
    assert "\n" not in message and input_error_line(refused.value) == message
    assert message.startswith("decoder 'torchcodec': torchcodec cannot be imported")
    assert message.endswith("pip install 'lit-retrieval[torchcodec]'")
    assert sample_frames(video, 4).mask.all()  # PyAV needs none of it


def test_missing_ffmpeg_libraries_are_one_line_naming_the_packages(monkeypatch, tmp_path):
    """torchcodec without FFmpeg imports (its image decoders need none) with `ffmpeg_major_version`
    None; simulated here by setting it so."""
    torchcodec = pytest.importorskip("torchcodec", reason="the torchcodec extra")
    monkeypatch.setattr(torchcodec, "ffmpeg_major_version", None)
    with pytest.raises(ConfigError) as refused:
        sample_frames(write_noise_video(tmp_path / "v.mp4", 1.0), 4, decoder="torchcodec")
    message = str(refused.value)
    assert "\n" not in message and f"apt-get install {FFMPEG_PACKAGES}" in message


def test_the_data_module_passes_the_decoder_to_every_item(torchcodec_ready, corpus):
    from lit_retrieval.data.batching.dataset import MultiEventDataset
    from lit_retrieval.data.datasets.canonical import MultiEventDataModule

    with pytest.raises(ConfigError, match="data.decoder must be one of 'pyav', 'torchcodec'"):
        MultiEventDataModule(str(corpus / "annotations.json"), decoder="opencv")
    with pytest.raises(ConfigError, match="data.decoder 'torchcodec' samples exact frames"):
        MultiEventDataModule(str(corpus / "annotations.json"), decoder="torchcodec", sampling="keyframe")
    items = {}
    for decoder in ("pyav", "torchcodec"):
        data = MultiEventDataModule(str(corpus / "annotations.json"), num_frames=6, image_size=32, decoder=decoder)
        data.setup("fit")
        dataset = data.datasets["train"]
        assert dataset.spec.decoder == decoder
        items[decoder] = [dataset[i] for i in range(2)]
        params = MultiEventDataset.cache_params(dataset.spec, False)
        assert ("decoder" in params) == (decoder == "torchcodec")  # PyAV caches keep their parameters
    for pyav, torchcodec in zip(items["pyav"], items["torchcodec"]):
        assert torchcodec["frame_times"].tolist() == pytest.approx(pyav["frame_times"].tolist(), abs=1e-9)
        assert torchcodec["frame_mask"].tolist() == pyav["frame_mask"].tolist()
        assert (torchcodec["frames"] - pyav["frames"]).abs().mean() < 0.05  # normalised: rounding only


@pytest.mark.parametrize("missing", ["torchcodec", "FFmpeg"])
def test_the_cli_refuses_in_one_line(missing, tiny_clip, corpus, tmp_path):
    """`lit-retrieval fit --data.decoder torchcodec` without torchcodec, or with a torchcodec that
    finds no FFmpeg (stand-in packages first on PYTHONPATH): one line naming the key and what to
    install, exit status 2, no traceback."""
    fake = tmp_path / "fake" / "torchcodec"
    (fake / "decoders").mkdir(parents=True)
    if missing == "torchcodec":
        (fake / "__init__.py").write_text("raise ImportError('No module named torchcodec (simulated)')\n")
    else:  # what torchcodec is when it loaded none of its libtorchcodec_core<N>.so
        (fake / "__init__.py").write_text("ffmpeg_major_version = None\n")
        (fake / "decoders" / "__init__.py").write_text("VideoDecoder = object\n")
    config = tmp_path / "fit.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, {"logger": False})))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "fit", "--config", str(config), "--data.decoder", "torchcodec"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-1].startswith("lit-retrieval fit: ") and "data.decoder 'torchcodec'" in lines[-1]
    expected = "pip install 'lit-retrieval[torchcodec]'" if missing == "torchcodec" else "apt-get install libavcodec59"
    assert expected in lines[-1]
