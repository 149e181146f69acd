"""Corpus-level caption metrics with the standard COCO caption evaluation code.

``score_captions`` runs ``pycocoevalcap`` exactly as the published Flickr8k and
COCO numbers are computed: the PTB tokenizer (Stanford CoreNLP, Java) over
candidates and references, then BLEU-1..4 (closest reference length),
METEOR 1.5 (Java), ROUGE-L and CIDEr-D. SPICE is left out: it needs Stanford
CoreNLP models downloaded at first use, which this project never does.

METEOR and the tokenizer need a Java runtime (``java`` on ``PATH``);
:func:`check_java` says how to install one when it is missing.
"""

import contextlib
import io
import shutil
import subprocess
from typing import Dict, List, Mapping

from components import config as config_lib

METRIC_NAMES = config_lib.CAPTION_METRIC_NAMES


class JavaMissingError(RuntimeError):
    """METEOR and the PTB tokenizer need Java."""


def check_java() -> str:
    """The ``java -version`` line, or :class:`JavaMissingError` with the fix."""
    java = shutil.which("java")
    if java is None:
        raise JavaMissingError(
            "Caption metrics (pycocoevalcap's PTB tokenizer and METEOR) need a Java runtime and "
            "none is on PATH. Install one, e.g. 'sudo apt-get install default-jre-headless' on "
            "Debian/Ubuntu or 'brew install openjdk' on macOS, then rerun.")
    completed = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise JavaMissingError(f"'{java} -version' failed: {completed.stderr.strip()}")
    return (completed.stderr or completed.stdout).strip().splitlines()[0]


def tokenize(captions: Mapping[str, List[str]]) -> Dict[str, List[str]]:
    """PTB-tokenized, lower-cased, punctuation removed: ``{id: [caption, ...]}``."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    check_java()
    with contextlib.redirect_stdout(io.StringIO()):
        return PTBTokenizer().tokenize(
            {key: [{"caption": caption} for caption in values] for key, values in captions.items()})


def score_tokenized(references: Mapping[str, List[str]], candidates: Mapping[str, List[str]],
                    with_meteor: bool = True, meteor=None) -> Dict[str, float]:
    """Metrics over already tokenized captions (``candidates[id]`` holds one caption).

    ``meteor``: a running ``pycocoevalcap`` METEOR scorer to reuse (its JVM takes
    seconds to start); one is started and stopped here when None.
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    if set(references) != set(candidates):
        raise ValueError(f"References and candidates cover different ids: "
                         f"{sorted(set(references) ^ set(candidates))[:5]} ...")
    if not references:
        raise ValueError("No captions to score.")
    if any(len(values) != 1 for values in candidates.values()):
        raise ValueError("Each id needs exactly one candidate caption.")
    references, candidates = dict(references), dict(candidates)
    with contextlib.redirect_stdout(io.StringIO()):  # BLEU prints its counts
        bleu, _ = Bleu(4).compute_score(references, candidates)
    scores = {f"BLEU-{n}": float(value) for n, value in enumerate(bleu, start=1)}
    if with_meteor:
        with contextlib.ExitStack() as stack:
            scorer = meteor or stack.enter_context(running_meteor())
            scores["METEOR"] = float(scorer.compute_score(references, candidates)[0])
    scores["ROUGE-L"] = float(Rouge().compute_score(references, candidates)[0])
    scores["CIDEr"] = float(Cider().compute_score(references, candidates)[0])
    return scores


@contextlib.contextmanager
def running_meteor():
    """One METEOR 1.5 JVM for several scorings; killed on exit. The JVM loads its paraphrase
    tables for ~10 s after it starts, in the background until the first scoring: start it
    before other work."""
    from pycocoevalcap.meteor.meteor import Meteor

    check_java()
    meteor = Meteor()
    try:
        yield meteor
    finally:
        meteor.meteor_p.kill()
        meteor.meteor_p.wait()


def score_many(references: Mapping[str, List[str]], candidate_sets: Mapping[str, Mapping[str, str]],
               with_meteor: bool = True, meteor=None) -> Dict[str, Dict[str, float]]:
    """Metrics of several candidate sets (``{name: {id: caption}}``) against the same raw
    references, with one tokenizer run and one METEOR process (``meteor``, a running scorer
    from :func:`running_meteor`, or one started here)."""
    tokenized = tokenize({
        **{f"ref/{key}": list(values) for key, values in references.items()},
        **{f"cand/{name}/{key}": [caption] for name, candidates in candidate_sets.items()
           for key, caption in candidates.items()}})
    tokenized_references = {key: tokenized[f"ref/{key}"] for key in references}
    with contextlib.ExitStack() as stack:
        if with_meteor and meteor is None:
            meteor = stack.enter_context(running_meteor())
        return {name: score_tokenized(
            tokenized_references, {key: tokenized[f"cand/{name}/{key}"] for key in candidates},
            with_meteor, meteor) for name, candidates in candidate_sets.items()}


def score_captions(references: Mapping[str, List[str]], candidates: Mapping[str, str],
                   with_meteor: bool = True) -> Dict[str, float]:
    """Corpus metrics of one raw candidate caption per id against its raw references."""
    return score_many(references, {"candidates": candidates}, with_meteor)["candidates"]
