"""`lit-retrieval metrics`: retrieval metrics of a saved score matrix, or of a weighted sum of
several (SALI Sec. 5, control (a): "average the similarity scores of each pair"), printed as one
JSON object.

A matrix `NAME.npy` written by `test` (`save_scores`) has its ids in `NAME_ids.json`
(`text_ids`, `video_ids`, `targets`); when that file exists, its `targets` give each text row's
video column. An ensemble needs every member's ids to agree (same queries and gallery in the same
order), or no member to have ids (then the shapes must agree and `--text-video` or the diagonal
gives the targets).

Rel-Multi (SALI Sec. 4): an ids file written with relational evaluation also carries each query's
relational flag (`relational`), its video's shot count (`num_shots`) and Rel-Multi's threshold
(`min_shots`, `null`: the median); the relational, non-relational and Rel-Multi metrics of the matrix
(or the ensemble) are then added to the output, as `test` reports them. An ids file written before
these were saved still works: the standard metrics and a note on stderr that Rel-Multi needs a new
`test` run with `evaluation.save_scores`.

Multi-caption video-to-text: `--v2t-rule strict` (ours, keys `v2t/...`) or `group_max`
(CLIP4Clip's group maximum, keys `v2t_group_max/...`).

Re-scoring (`--rescore dsl inverted_softmax qbnorm`, the methods of `RESCORINGS` in
lit_retrieval/metrics/rescoring.py): each method's metrics are added beside the raw ones, keyed by
its name, `dsl/...`, `inverted_softmax/...`, `qbnorm/...`, as `test` keys them. `--temperature`
sets every chosen method's temperature (default: dsl 0.01, inverted_softmax 0.05, qbnorm 0.05).
QB-Norm needs `--bank BANK.npy`: a float `[bank queries, videos]` matrix of training queries scored
against the same video columns as the matrix (what QB-Norm's repository calls the train-test
similarities), and `--bank-k` (default 1) for its activation set.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


import torch

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.metrics.ranking import retrieval_metrics
from lit_retrieval.metrics.rescoring import RESCORINGS, RescoreConfig, rescored_metrics
from lit_retrieval.metrics.saved_scores import ensemble, load_bank, rel_multi
from lit_retrieval.metrics.score_files import load_matrix, load_targets


def rescore_config(methods: list[str], temperature: float | None, bank_k: int) -> RescoreConfig:
    """The `RescoreConfig` of `--rescore`, `--temperature` (every chosen method's) and `--bank-k`
    (QB-Norm's)."""

    def options(name: str) -> Any:
        given: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
        if name == "qbnorm":
            given["k"] = bank_k
        return RESCORINGS[name].options(**given)

    return RescoreConfig(**{name: options(name) for name in methods})


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval metrics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sim", nargs="?", help=".npy score matrix, rows = texts, columns = videos")
    parser.add_argument(
        "--ensemble", nargs="+", type=Path, metavar="NPY", help="score the weighted sum of these matrices instead"
    )
    parser.add_argument(
        "--weights", nargs="+", type=float, help="one weight per --ensemble matrix (default: equal, summing to 1)"
    )
    parser.add_argument(
        "--text-video",
        help=".npy int array: video column of each text row (default: the ids file's targets, else the diagonal)",
    )
    parser.add_argument("--ties", choices=["optimistic", "pessimistic", "average"], default="optimistic")
    parser.add_argument(
        "--min-shots", type=int, help="Rel-Multi's shot threshold (default: the ids file's, else the median)"
    )
    parser.add_argument(
        "--v2t-rule", choices=["strict", "group_max"], default="strict", help="multi-caption V2T (default: strict)"
    )
    parser.add_argument(
        "--rescore", nargs="+", choices=list(RESCORINGS), help="re-scorings reported beside the raw metrics"
    )
    parser.add_argument("--temperature", type=float, help="temperature of every --rescore method")
    parser.add_argument("--bank", type=Path, help="QB-Norm's querybank: .npy [bank queries, videos] scores")
    parser.add_argument("--bank-k", type=int, default=1, help="QB-Norm's top-k of each bank query (default 1)")
    args = parser.parse_args(argv)
    rescoring = args.rescore or []
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature > 0):
        parser.error("--temperature must be a finite number > 0")
    if args.bank_k < 1:
        parser.error("--bank-k must be >= 1")
    if ("qbnorm" in rescoring) != (args.bank is not None):
        parser.error("--rescore qbnorm and --bank go together (QB-Norm's querybank scores)")
    if args.min_shots is not None and args.min_shots < 0:
        parser.error("--min-shots must be >= 0")
    if (args.sim is None) == (args.ensemble is None):
        parser.error("give one score matrix or --ensemble A.npy B.npy ...")
    if args.weights is not None and args.ensemble is None:
        parser.error("--weights goes with --ensemble")
    try:
        if args.ensemble is not None:
            if len(args.ensemble) < 2:
                raise ValueError("--ensemble needs at least two matrices")
            weights = args.weights or [1.0 / len(args.ensemble)] * len(args.ensemble)
            scores, ids = ensemble(args.ensemble, weights)
        else:
            scores, ids = load_matrix(Path(args.sim))
        if args.text_video:
            targets = load_targets(Path(args.text_video))
        else:
            targets = torch.tensor(ids["targets"], dtype=torch.long) if ids is not None else None
        matrix = torch.from_numpy(scores).double()
        results = retrieval_metrics(matrix, targets, args.ties, args.v2t_rule)
        if targets is None:
            targets = torch.arange(matrix.shape[0])
        if rescoring:
            config = rescore_config(rescoring, args.temperature, args.bank_k)
            bank = load_bank(args.bank, matrix.shape[1], config.qbnorm) if config.qbnorm else None
            results.update(rescored_metrics(matrix, targets, config, bank, args.ties, args.v2t_rule))
        source = args.ensemble[0] if args.ensemble else Path(args.sim)
        results.update(rel_multi(matrix, targets, ids, source, args.min_shots, args.ties))
        print(json.dumps(results))
    except ValueError as err:
        if isinstance(err, UsageError):
            raise
        extra = [p for p in (args.text_video, args.bank) if p]
        inputs = [str(p) for p in (*(args.ensemble or [args.sim]), *extra)]
        named = any(path in str(err) for path in inputs)
        raise InputError(
            str(err) if named else f"{', '.join(inputs)}: {err}"
        ) from None  # one line from `lit-retrieval`
    return 0
