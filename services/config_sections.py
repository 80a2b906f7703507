"""The config's sections, one dataclass each: every field with its default and, in its comment, a one-line
reason (docs/configuration.md is generated from these comments by services/config_reference.py). The whole
config, loading and validation are services/config.py's."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelsConfig:
    # "auto": the first provider whose key is set, else the local model (services/providers.py)
    task: str = "auto"  # model of the task agent; role alias "task"
    meta: str | list[str] = "auto"  # model of the meta agent; role alias "meta" (the first); a list (or --meta_model a,b): a bandit (loop.meta_bandit) picks one per generation
    grader: str = "auto"  # model of the proof grader; role alias "grader"
    judge: str = "auto"  # model of LLM judges in answer domains; role alias "judge"
    meta_agent: str = "builtin"  # what edits the code each generation: builtin (the workspace's meta agent, run by inside/run_meta.py) | paper (the same, starting from the HyperAgents reference's meta agent: loop.initial_meta_agent paper) | claude-code | codex | mini-swe-agent | an installed plug-in's (services/coding_agents/; python -m services.install --coding-agents)
    heldout_grader: str | None = None  # a second, independent grader model for imo_proof (any domain graded by a grader model): the best nodes' proofs graded again, never optimized against, to report the gap per generation (loop.best_choice heldout reads it); role alias "heldout_grader"; null = off


@dataclass
class GatewayConfig:
    host: str = "127.0.0.1"  # loopback only: the gateway holds the provider keys
    port: int = 0  # 0 = any free port, chosen per run
    max_retries: int = 5  # retries of transient provider errors (429, 5xx, timeouts)
    breaker_failures: int = 5  # provider failures in a row (each after its retries) that stop the run, if a probe call fails too
    backoff_base_s: float = 1.0  # first retry delay; doubles each time, with full jitter
    backoff_max_s: float = 30.0  # cap of one retry delay
    request_timeout_s: float = 900.0  # one provider call; reasoning models can be slow
    cache: str = "temperature0"  # temperature0 | all | off: which identical requests are replayed
    prompt_caching: bool = True  # ask providers to cache stable prompt prefixes (system prompt, a conversation's history), billed at their cached rate
    budget_usd: float | None = None  # stop new calls once this much is spent (None = no limit)
    budget_tokens: int | None = None  # stop new calls once this many tokens are spent
    max_concurrent_calls: int | None = None  # provider calls in flight at once, over all models (None = no limit)
    requests_per_minute: int | None = None  # provider calls started per minute and model, retries too (None = no limit)
    max_output_tokens: int = 32768  # cap of a request's max_tokens, and what a request without one gets (bounds its cost)
    max_n: int = 4  # most choices (`n`) one request may ask for
    max_request_mb: int = 16  # largest request body; a larger one is refused unread
    local_context: int = 2048  # tokens of context a local model is served with; prompt runs at ~300 tokens/s on 2 cores
    local_threads: int = 0  # CPU threads of the local model server (0 = half the cores)
    prices: dict = field(default_factory=dict)  # model -> [usd per 1M input, per 1M output(, per 1M cached read, per 1M cache write)] for models litellm has no price for


@dataclass
class HarnessConfig:
    num_workers: int = 5  # rows evaluated in parallel (threads in one worker process)
    save_interval: int = 100  # rewrite predictions.csv every N finished rows (the journal is written at once)
    row_timeout_s: float = 1800.0  # a row still running after this is recorded as an error
    start_timeout_s: float = 300.0  # a worker that has not loaded the agent by then is killed
    max_prediction_bytes: int = 1_000_000  # a row's answer longer than this (UTF-8) is recorded as an error
    data_files: dict = field(default_factory=dict)  # domain -> data file, for domains not bundled (amo_bench)
    label_case: str = "lenient"  # how imo_proof reads a grader's labels: lenient (case and space ignored) | exact (the reference's); services/departures.py


@dataclass
class SandboxConfig:
    backend: str = "auto"  # auto | docker | bwrap | none; auto = docker if an engine answers, else bwrap
    memory_mb: int = 4096  # address space (bwrap) / memory limit (docker) of agent code
    pids: int = 256  # processes and threads at once: a fork bomb stops here
    cpus: float = 2.0  # CPU cores a docker container may use
    cpu_seconds: int = 7200  # CPU time of one sandboxed process before the kernel kills it
    file_size_mb: int = 1024  # largest file agent code may write
    disk_mb: float = 2048  # what commands may write in all to the workspace and writable folders; past it they are killed
    tmp_mb: int = 512  # size of the private /tmp
    output_cap_mb: float = 16  # stdout+stderr kept from one command; a command printing more is killed
    docker_image: str = "hyperagents-sandbox:latest"  # built by `python -m services.sandbox build-image`
    docker_host: str | None = None  # engine address (default: DOCKER_HOST or the local socket)
    executor: str = "local"  # local | ray: where sandboxes run; ray = on the nodes of a Ray cluster, each in its own backend
    ray_address: str | None = None  # with executor ray: None = a private Ray instance here, "auto" = this machine's cluster, HOST:PORT or ray://HOST:PORT


@dataclass
class LoopConfig:
    max_generation: int = 10  # generations after the initial node
    max_minutes: float | None = None  # wall clock of one command (run_optimization, or a resume of it) before it stops the run as Ctrl-C does, resumably; counted from the command's start; a resume keeps no limit unless given one (archive/run_folder.py PER_COMMAND); null = none
    parent_selection: str = "score_child_prop"  # random | latest | best | score_prop | score_child_prop (the paper's) | pareto (GEPA's per-row front) | islands (score_child_prop within sub-archives: search.islands) | an installed plug-in's; each a file of search/parent_selection/
    merge_every: int = 0  # every this many generations, a merge: its meta agent gets a second parent of another lineage that is better on rows the first is not, and is asked to combine them; 0 = never (the paper's)
    merge_partner: str = "complement"  # with merge_every: how the second parent is chosen (search/merge_partner/, or a plug-in's)
    meta_bandit: str = "ucb1"  # with models.meta a list: the meta model choice (search/meta_model_choice/: ucb1 | thompson, or a plug-in's), rewarded by the child's gain over its parent per dollar
    novelty_threshold: float | None = None  # a child whose change is at least this alike (0-1, by novelty_measure) to an earlier node's is recorded duplicate and not evaluated (archive/novelty.py); null = off (the paper's)
    novelty_measure: str = "dice"  # how alike two changes are: dice (the Dice coefficient of the diffs' changed lines, in any order) | an installed plug-in's; each a file of search/novelty/
    seed: int | None = None  # seeds parent selection, so a run can be replayed
    parallel: int = 1  # generations in flight at once (meta agent and evaluation each in its own sandbox)
    replayable: bool = True  # with parallel > 1: generation g picks its parent among generations <= g - parallel, waiting for them, so a seeded run replays; false: from every node finished when a slot frees (faster when generations take uneven time, not replayable)
    eval_samples: int = -1  # rows of each full evaluation split (-1 = all)
    skip_staged_eval: bool = False  # go straight to the full evaluation
    initial_eval: str = "full"  # full: the initial node is screened, then evaluated on the full splits like any node | stage: on the first stage's rows of its splits only, no verdict; services/departures.py
    row_error: str = "wrong"  # a row on which the task agent's own code raised (never a provider's failure, a timeout or a cap of ours): wrong: a wrong answer, the evaluation stands | invalid: the evaluation has no score of its own (a full one keeps the screening it continued); services/departures.py
    reuse_evaluations: bool = True  # a node whose task agent's code an earlier node has takes that node's evaluations | false: each node's evaluation is its own (a resume still pays no row twice); services/departures.py
    stages: list | dict | None = None  # screening stages before the full evaluation, [[rows, above], ...] or [[rows, above, rule], ...], for every domain or by domain name ({imo_grading: [[10, 0]], ...}; a domain not named keeps its own): each runs the first rows of train and the next runs only if every domain passes the stage's promotion rule (`promotion` when the stage names none); null = each domain's own (10 rows, above 0)
    promotion: str = "score_above"  # how a stage promotes a child: score_above (the paper's: score > above) | not_worse_than_parent (and not worse than its parent on the rows both ran, by a one-sided paired test: search.not_worse_than_parent.level and .test) | sica (and at least the lower bound of the best node's interval on those rows, search.sica.confidence: 0.95) | an installed plug-in's; each a file of search/promotion/
    racing: bool = True  # a full evaluation runs its selection split (val) in chunks and stops once a one-sided bound says the child can reach neither the best node's score nor its promotion rule's bar: recorded raced_out with the rows it has, a parent on them, never the best; the other splits run only for a child that finished its race (search/racing.py; the paper's: off); services/departures.py
    racing_chunk: int = 10  # with racing: rows of the selection split between two looks (a chunk runs in parallel, harness.num_workers at once)
    racing_alpha: float = 0.05  # with racing: the chance, over all looks, of racing out a child whose true skill reaches its target (spent over the looks, O'Brien-Fleming-like)
    pictures_every_s: float = 10.0  # plots and report.html are redrawn when a node comes back, at most this often (and at the end of the run)
    best_choice: str = "highest"  # which node is the run's best (report, --final_test, transfer, sica's peer): highest (the paper's: the highest selection score; `ties` breaks equal ones) | paired (nodes in generation order; a node replaces the best so far only when a one-sided paired test on the selection split's shared rows finds it better: search.paired.level and .test) | heldout (nodes in generation order; a node replaces the best so far only when it scores higher and its grade by models.heldout_grader is not below the best's, so the held-out grade never falls along the bests) | an installed plug-in's; each a file of search/best_choice/
    final_test: bool = False  # once the last generation is recorded, evaluate the test split once, for the node chosen on val and the initial node (the loop never reads test scores)
    edit_select_parent: bool = False  # the workspace's select_next_parent.py chooses parents
    run_baseline: str | None = None  # no_selfimprove (meta agent frozen) | no_archive (always the latest node)
    initial_meta_agent: str = "default"  # the meta agent a run from a project task agent (--initial_agent proofautograder) starts with: default (the project's, meta_agent/) | paper (the reference's one-line meta agent and agent code, the task agent as its task_agent.py); services/departures.py
    feedback: str = "train_reports"  # what feedback/<node>/ gives later meta agents: train_reports (patch, train scores, train reports and predictions) | paper (also the meta transcript, a generation log with val scores and each train row's transcript, bounded: optimizer/feedback.py); services/departures.py
    domains: list[str] = field(default_factory=list)  # the domains of a new run that names none (--domain, --domain_spec): names, and spec files (.yaml/.yml; a relative path is in the folder of the config file that names it, else the current folder); never read on a resume
    initial_agent: str = "default"  # the agent of node `initial`: a name of optimizer/initial_agents.py (paper: the reference's generic agents) or an agent folder's path
    stage_splits: str = "train"  # train | train_and_val: what each screening stage runs, its verdict always read on train (the paper's: the same rows of val too, so a node that stops there has a val score)
    staged_score: str = "train"  # train | selection: the split a node that only passed screening is selected on, scaled by its share of the full rows (the paper's: selection, its val rows)
    scale_initial: bool = False  # the initial node's selection score is scaled by the first stage's share of the rows, as if it only passed screening (the paper's: yes, so it is rarely chosen again)
    ties: str = "latest"  # latest | earliest: which of equal scores `best` takes, as a parent and as the run's best (the paper's: earliest)
    tie_tolerance: float = 1e-12  # scores closer than this are equal, and `ties` decides, wherever a best is taken (archive/selection.py TIE_TOLERANCE); 0: bit-equal floats only; services/departures.py
    no_score: str = "stop"  # when no node can be a parent (none valid with a score on every domain): stop: the run ends in one line naming the initial node's state | initial_at_zero: the initial node is the parent, at score 0; services/departures.py
    meta_failure: str = "child"  # a meta agent that failed (exited non-zero, timed out, every call failed): its child is recorded meta_failed and never evaluated under both | parent: its parent (never the initial node) is no longer chosen either; services/departures.py
    try_command: bool = True  # the meta agent gets a command that runs the task agent on train rows (the paper's: none)
    meta_timeout_s: float = 3600.0  # wall clock of one meta agent run
    meta_max_calls: int = 40  # model calls (one tool call each) of one meta agent run, enforced by the gateway
    selector_timeout_s: float = 120.0  # one run of the agent's own select_next_parent.py
    try_max_calls: int = 200  # model calls of the meta agent's try command in one meta run, enforced by the gateway
    workspace_file_mb: float = 5  # largest file of a workspace taken into a node's commit; larger ones are dropped
    workspace_total_mb: float = 50  # all files of a workspace taken into a node's commit; past this, files are dropped


@dataclass
class TrackingConfig:
    backends: list[str] = field(default_factory=list)  # experiment trackers the run also logs to (--track): mlflow | wandb | tensorboard, each a pip extra (pip install -e ".[mlflow]")
    mlflow_uri: str | None = None  # MLflow tracking URI (http://HOST:PORT; sqlite:///PATH with the full mlflow package); null = a file store in RUN/tracking/mlruns
    experiment: str | None = None  # the MLflow experiment and the W&B project a run is logged under; null = MLFLOW_EXPERIMENT_NAME or WANDB_PROJECT when set, else hyperagents
    wandb_mode: str | None = None  # offline: W&B's files in RUN/tracking/wandb (upload later with `wandb sync`) | online (needs WANDB_API_KEY); null = WANDB_MODE when set, else offline
    wandb_entity: str | None = None  # the W&B team or user; null = the account's default
    text_kb: int = 256  # agent-written text (a patch, an error) is cut to this many KiB before a tracker gets it
