"""The 16 UVRB datasets: query prompt and metric (GVE Tab. 5), and the abilities each one measures
(GVE Sec. 3.1): task type TXT / CMP / VIS and, for textual queries, domain CG / LC or a
fine-grained sub-domain S / T / PR."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UVRBDataset:
    name: str
    prompt: str
    metric: str  # "R@1", "R@10" or "P@1"
    task: str  # TXT, CMP or VIS
    domain: str | None  # CG, S, T, PR, LC for textual queries; None otherwise
    query_format: str  # modalities of the query, e.g. "T", "TI", "I", "V"


UVRB_DATASETS: dict[str, UVRBDataset] = {
    d.name: d
    for d in [
        UVRBDataset(
            "MSRVTT",
            "Find the clip that corresponds to the described scene in the given video.",
            "R@1",
            "TXT",
            "CG",
            "T",
        ),
        UVRBDataset("DiDeMo", "Find a video that includes the following described scenes.", "R@1", "TXT", "CG", "T"),
        UVRBDataset("CRB-G", "Find the video according to the general text description.", "R@1", "TXT", "CG", "T"),
        UVRBDataset("CRB-S", "Find the video according to the spatial description.", "R@1", "TXT", "S", "T"),
        UVRBDataset("VDC-O", "Find the video according to the object description.", "R@1", "TXT", "S", "T"),
        UVRBDataset("CRB-T", "Find the video according to the temporal description.", "R@1", "TXT", "T", "T"),
        UVRBDataset("CMRB", "Find the video according to the camera motion description.", "R@10", "TXT", "T", "T"),
        UVRBDataset("DREAM-E", "Find the video according to the text description.", "R@1", "TXT", "PR", "T"),
        UVRBDataset(
            "LoVR-TH",
            "Find the video according to text description about video theme information.",
            "R@10",
            "TXT",
            "PR",
            "T",
        ),
        UVRBDataset(
            "PEV-K",
            "Find the video according to the text description of a series of keywords.",
            "R@1",
            "TXT",
            "PR",
            "T",
        ),
        UVRBDataset("LoVR-V", "Find the long video according to the long text description.", "R@1", "TXT", "LC", "T"),
        UVRBDataset("VDC-D", "Find the video according to the detailed text description.", "R@1", "TXT", "LC", "T"),
        UVRBDataset(
            "MS-TI",
            "Find the video clip that corresponds to the given text and the given image.",
            "P@1",
            "CMP",
            None,
            "TI",
        ),
        UVRBDataset(
            "MS-TV",
            "Find the video clip that corresponds to the given text and the given video.",
            "P@1",
            "CMP",
            None,
            "TV",
        ),
        UVRBDataset("MSRVTT-I2V", "Find the video according to the image.", "R@1", "VIS", None, "I"),
        UVRBDataset(
            "LoVR-C2V", "Find the original long video according to the short video clip.", "R@1", "VIS", None, "V"
        ),
    ]
}
