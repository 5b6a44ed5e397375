"""The names a trace and the analysis agree on: the NVTX domain, the phases, the marks.

One loop annotated with :mod:`specnsys.annotate` (or mapped onto these names by rules) and one
analysis that reads it share these constants, so that a name is typed once. The analysis side
(``specnsys.ingest``, ``attribution``, ``metrics``, ``report``) imports the vocabulary from here
and never from :mod:`specnsys.annotate`, which needs ``nvtx``: analysing a trace must not
require the package that writes one.

Nothing is imported here (not even the standard library): this module is loaded both inside users'
inference processes (through ``annotate``) and by the analysis stack.
"""

from __future__ import annotations

__all__ = [
    "ACCELERABLE",
    "ACCEPTANCE_MARKS",
    "ACCEPTED_MARK",
    "API_CALL_EVENT_CLASSES",
    "API_CALL_SQL",
    "BASELINE_ACCELERABLE",
    "DEVICE_MEMORY_PEAK_MARK",
    "DOMAIN",
    "DRAFT_ROLE",
    "FIRST_TOKEN_MARK",
    "INPUT_TOKENS_MARK",
    "LAUNCH_NAME_PATTERN",
    "OUTPUT_TOKENS_MARK",
    "PHASES",
    "PHASE_RGB",
    "PREFILL_ROLES",
    "PROPOSED_MARK",
    "REQUEST_PHASE",
    "ROLE_PHASES",
    "SAMPLER_PHASE",
    "SPEC_ACCELERABLE",
    "STEP_PHASE",
    "TARGET_BYTES_MARK",
    "TOKENS_MARK",
    "TORCH_MARK_PREFIX",
    "TORCH_RANGE_PREFIX",
    "VALUE_MARKS",
]

# --------------------------------------------------------------------------- domain and phases

DOMAIN = "specnsys"
"""The NVTX domain of every range and mark the annotation API emits. Ranges of other domains
(an engine's own NVTX names) reach a phase only through name rules."""

PHASES: tuple[str, ...] = (
    "request",
    "prefill",
    "draft_prefill",
    "decode",
    "forward",
    "draft",
    "verify",
    "sample",
    "kv",
    "sync",
    "schedule",
)
"""The phase names, in nesting order (outermost first). Their meaning:

* ``request`` -- a start/end range per generation request, from its first prompt token to its
  last output token (requests overlap under batching and may end on another thread);
* ``prefill`` / ``draft_prefill`` -- the target / the draft model reads the prompt;
* ``decode`` -- one decode step of the batch; the phases below nest inside it;
* ``forward`` -- baseline: one target forward that yields one token per sequence;
* ``draft`` -- speculative: the draft model proposes k tokens (k draft forwards);
* ``verify`` -- speculative: one target forward over the k + 1 positions;
* ``sample`` -- logits processing, token choice, rejection sampling;
* ``kv`` -- KV-cache allocation, rollback after rejected drafts, compaction;
* ``sync`` -- explicit host/device synchronisation and device-to-host token copies;
* ``schedule`` -- batch formation, admission, waiting for a free slot.
"""

REQUEST_PHASE = "request"
"""The phase that spans one request; the analysis window runs from the first one's start to the
last one's end (the whole trace when there is none)."""

STEP_PHASE = "decode"
"""The phase that spans one decode step of the batch (what "a step" means in every output)."""

SAMPLER_PHASE = "sample"
"""The phase whose share of the window is reported as the sampler share."""

BASELINE_ACCELERABLE: tuple[str, ...] = ("forward",)
"""The work speculative decoding speeds up, as a baseline run records it."""

SPEC_ACCELERABLE: tuple[str, ...] = ("draft", "verify")
"""What replaces :data:`BASELINE_ACCELERABLE` in a speculative run."""

ACCELERABLE: tuple[str, ...] = BASELINE_ACCELERABLE + SPEC_ACCELERABLE
"""The accelerable phases of either kind of run, in reporting order; every other phase is
non-accelerable time (the Amdahl ``1 - p``)."""

PREFILL_ROLES: tuple[str, ...] = ("prefill", "draft_prefill")
"""Phases whose nested accelerable ranges are prefill work (docs/design.md#nesting-by-role):
a ``forward`` run by a prefill reads the prompt, it is not a decode forward."""

DRAFT_ROLE = "draft"
"""The phase that owns everything nested in it: the draft model's own sampling, forwards and
cache work are draft work (docs/design.md#nesting-by-role)."""

ROLE_PHASES: tuple[str, ...] = (*PREFILL_ROLES, DRAFT_ROLE)
"""Phases that give their nested ranges a role: the outermost of them on a thread decides."""

PHASE_RGB: dict[str, int] = {
    "request": 0x7F7F7F,
    "prefill": 0x1F77B4,
    "draft_prefill": 0x9EDAE5,
    "decode": 0xC7C7C7,
    "forward": 0x2CA02C,
    "draft": 0x98DF8A,
    "verify": 0xD62728,
    "sample": 0xFF7F0E,
    "kv": 0x9467BD,
    "sync": 0x8C564B,
    "schedule": 0xE377C2,
}
"""The colour of each phase (0xRRGGBB), the same in the Nsight Systems timeline (the annotation
API gives the ranges these colours) and in specnsys's figures, so a phase is recognised at a
glance in both."""

# --------------------------------------------------------------------------- marks

PROPOSED_MARK = "proposed"
"""Mark whose payload is k, the drafts offered to one sequence in one step."""

ACCEPTED_MARK = "accepted"
"""Mark whose payload is the drafts of that step accepted, 0..k (the bonus token not counted);
emitted right after its :data:`PROPOSED_MARK` on the same thread."""

ACCEPTANCE_MARKS: tuple[str, ...] = (PROPOSED_MARK, ACCEPTED_MARK)
"""The pair of marks acceptance statistics are read from (one pair per sequence per step)."""

TOKENS_MARK = "tokens"
FIRST_TOKEN_MARK = "first_token"
OUTPUT_TOKENS_MARK = "output_tokens"
TARGET_BYTES_MARK = "target_bytes"
DEVICE_MEMORY_PEAK_MARK = "device_memory_peak"
INPUT_TOKENS_MARK = "input_tokens"

VALUE_MARKS: dict[str, str] = {
    TOKENS_MARK: "output tokens emitted by one decode step across the batch (1 for the first "
    "token a prefill emits); their sum is the run's output token count",
    FIRST_TOKEN_MARK: "payload = request id; emitted when that request's first output token is "
    "known on the host (TTFT = this mark - the request range's start)",
    OUTPUT_TOKENS_MARK: "output tokens of one request, emitted on the ending thread just before "
    "its request range ends (TPOT = (end - first token) / (output_tokens - 1))",
    TARGET_BYTES_MARK: "bytes one target forward reads (weights + KV cache), inside the forward / "
    "verify / prefill range it belongs to (achieved bandwidth = bytes / phase time)",
    DEVICE_MEMORY_PEAK_MARK: "peak device memory allocated (bytes) during the enclosing phase "
    "range, emitted inside it (CUDA runs; torch.cuda.max_memory_allocated after a reset at its "
    "start)",
    INPUT_TOKENS_MARK: "prompt tokens one prefill (or draft prefill) reads, inside that range: "
    "what prefill time is fitted against (specnsys forecast)",
}
"""Integer-payload marks the analysis reads, each with its meaning: facts a trace's timings
cannot tell (how many tokens a step emitted, how many bytes a forward read)."""

# --------------------------------------------------------------------------- torch profiler names

TORCH_MARK_PREFIX = "specnsys.mark:"
"""How a mark travels through the PyTorch profiler, which has ranges but no marks or payloads:
a zero-length ``record_function`` named ``specnsys.mark:<name>=<int>`` (or ``specnsys.mark:<name>``
without a payload) is the mark ``<name>`` of the ``specnsys`` domain with that integer payload,
at the range's start (docs/design.md#marks)."""

TORCH_RANGE_PREFIX = "specnsys.range:"
"""A ``record_function`` named ``specnsys.range:<name>[=<int>]`` is a range ``<name>`` of the
``specnsys`` domain (with that integer payload): how a ``request`` range carries its request id,
and how a custom phase name keeps its domain. A phase name of the vocabulary needs no prefix: a
``record_function`` named ``decode`` is the ``decode`` phase (docs/design.md#readers)."""

# --------------------------------------------------------------------------- CUDA runtime calls

API_CALL_EVENT_CLASSES: tuple[int, ...] = (0, 1)
"""``event_class`` values of the ``runtime`` rows that are CUDA runtime / driver API calls; the
other classes (backtraces) describe a call rather than being one."""

API_CALL_SQL = (
    f"event_class IN ({', '.join(map(str, API_CALL_EVENT_CLASSES))})"
    " AND NOT coalesce(is_backtrace, false)"
)
"""SQL predicate on ``runtime`` keeping the API calls that may launch GPU work (the rows a GPU
op's correlation id is matched against); the same filter as :data:`API_CALL_EVENT_CLASSES` plus
the backtrace flag."""

LAUNCH_NAME_PATTERN = "(?i)launch"
"""Regex (case-insensitive) on a runtime call's name that marks a launch -- a kernel or graph
launch such as ``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaGraphLaunch``; launches are
counted per phase, and a launch without a correlation id is still attributed."""
