"""The demo's cast: the models with their behaviour, the agents that run them, and where the
router and the reliability layer send their traffic.

Plain data, read by every record family of the generator (records.demo.generator).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelProfile:
    provider: str
    # Lognormal (median ms, sigma): pick latency for classifier models, call duration for main
    # models. The sigmas differ so that the latency percentiles of each model look different.
    latency: tuple[float, float]
    # Chance that a verdict on this model breaks the output contract (outside incidents).
    contract_break: float = 0.02
    # Chance that the main model's first call is the classifier's top pick.
    first_agrees: float = 0.75
    # Chance that a pick fails outright (classifier models).
    pick_errors: float = 0.02
    # Chance that a turn calls a tool the harness never gave it (main models).
    invents: float = 0.03
    thinking: bool = False
    accepts_forced_tool_choice: bool = True


# The tables below read best aligned, one entry a line, so the formatter leaves them be.
# fmt: off
MODELS: dict[str, ModelProfile] = {
    # classifier models
    "claude-haiku-4-5": ModelProfile("anthropic", (140.0, 0.35), contract_break=0.02,
                                     first_agrees=0.8, pick_errors=0.02),
    "qwen3-8b": ModelProfile("ollama", (85.0, 0.75), contract_break=0.12, first_agrees=0.62,
                             pick_errors=0.06, accepts_forced_tool_choice=False),
    "gpt-5-mini": ModelProfile("openai", (260.0, 0.5), contract_break=0.05, first_agrees=0.72,
                               pick_errors=0.03),
    # main models
    "claude-sonnet-4-5": ModelProfile("anthropic", (1900.0, 0.45), contract_break=0.004,
                                      invents=0.03),
    "gpt-5": ModelProfile("openai", (3400.0, 0.55), contract_break=0.006, invents=0.06,
                          thinking=True),
    # Extended thinking refuses a forced tool choice: the UnsupportedToolChoiceError source.
    "claude-opus-5-5": ModelProfile("anthropic", (4600.0, 0.5), contract_break=0.002,
                                    invents=0.015, thinking=True, accepts_forced_tool_choice=False),
}
UNKNOWN_MODEL = ModelProfile("openai", (1500.0, 0.5))

# Where the reliability layer sends a provider's traffic when it gives up on it.
FALLBACKS: dict[str, tuple[str, str]] = {
    "anthropic": ("openai", "gpt-5"),
    "openai": ("anthropic", "claude-sonnet-4-5"),
    "ollama": ("anthropic", "claude-haiku-4-5"),
}

# The router's swaps per default model: cheaper models for easy steps, bigger ones for hard ones.
SWAPS: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "claude-sonnet-4-5": (("claude-haiku-4-5", "claude-opus-5-5", "gpt-5"), (5, 3, 2)),
    "gpt-5": (("gpt-5-mini", "claude-sonnet-4-5"), (6, 4)),
    "claude-opus-5-5": (("claude-sonnet-4-5", "claude-haiku-4-5"), (6, 4)),
}

# Bad spells per seat model over the span (each 1/24 of it), when most verdicts break contract.
INCIDENTS: dict[str, int] = {"qwen3-8b": 3, "gpt-5-mini": 1}

# Always served, never offered: the tools the harness gives every call.
DOORS = ("read_skill", "list_skills", "skip_step", "present")
NARROW_TO = 3  # top-N ranked tools served when narrowing applies
# Names a model calls although no harness ever offered them.
INVENTED = ("refund_now", "execute_python", "browse", "search_documents", "delete_all",
            "get_weather", "bash")


@dataclass(frozen=True)
class Agent:
    name: str
    main_model: str
    classifier_model: str  # ranks the tools (tool_choice.pick)
    seat_model: str  # the classifier seat that rules on gated calls (classifier.verdict)
    protocol: str  # envelope | hybrid | implicit
    tools: tuple[str, ...]  # action names in offered order
    gated: tuple[str, ...] = ()  # calls that need a verdict
    narrowing: bool = True
    sub_agents: tuple[str, ...] = ()
    weight: float = 1.0  # share of top-level runs; 0 runs only as a sub-agent


DEFAULT_AGENTS: tuple[Agent, ...] = (
    Agent("support-bot", "claude-sonnet-4-5", "claude-haiku-4-5", "qwen3-8b", "hybrid",
          ("search_docs", "lookup_order", "read_ticket", "create_ticket", "send_email",
           "issue_refund", "escalate", "query_db"),
          gated=("send_email", "issue_refund", "create_ticket"), sub_agents=("billing-agent",),
          weight=4),
    Agent("code-reviewer", "gpt-5", "gpt-5-mini", "gpt-5-mini", "envelope",
          ("read_file", "grep", "list_dir", "git_diff", "write_file", "run_tests", "run_shell",
           "post_comment"),
          gated=("write_file", "run_shell", "post_comment"), sub_agents=("test-runner",),
          weight=3),
    Agent("research-assistant", "claude-opus-5-5", "qwen3-8b", "claude-haiku-4-5", "implicit",
          ("web_search", "fetch_url", "read_pdf", "summarize", "save_note", "cite",
           "send_email"),
          gated=("send_email", "save_note"), sub_agents=("web-researcher",), weight=2),
    Agent("data-analyst", "claude-sonnet-4-5", "qwen3-8b", "qwen3-8b", "hybrid",
          ("query_db", "describe_table", "run_python", "plot_chart", "export_csv",
           "write_file"),
          gated=("run_python", "write_file", "export_csv"), narrowing=False, weight=2),
    # sub-agents only
    Agent("billing-agent", "gpt-5", "claude-haiku-4-5", "qwen3-8b", "implicit",
          ("lookup_invoice", "issue_refund", "update_subscription"),
          gated=("issue_refund", "update_subscription"), weight=0),
    Agent("test-runner", "claude-sonnet-4-5", "gpt-5-mini", "gpt-5-mini", "envelope",
          ("run_tests", "read_file", "grep", "write_file"), gated=("write_file",), weight=0),
    Agent("web-researcher", "gpt-5", "qwen3-8b", "claude-haiku-4-5", "hybrid",
          ("web_search", "fetch_url", "summarize", "read_pdf"), weight=0),
)

# The harness's control tools and the decision each stands for.
CONTROL_TOOLS = {"complete_task": "taskComplete", "ask_user": "chat",
                 "update_payload": "payloadChange"}
# fmt: on


def profile_of(model: str) -> ModelProfile:
    """The model's profile; a model the cast does not know behaves like an average one."""
    return MODELS.get(model, UNKNOWN_MODEL)
