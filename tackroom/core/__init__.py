"""The nouns: tasks, environments, actions, observations, policies, episodes."""

from tackroom.core.actions import (
    Action,
    Click,
    ClickAt,
    Edit,
    Press,
    Shell,
    Submit,
    Type,
    TypeText,
    action_from_dict,
)
from tackroom.core.episode import Episode, Outcome, Turn, episode_id
from tackroom.core.errors import (
    ActionError,
    ConfigError,
    HarnessError,
    InfraError,
    PolicyError,
    RecordStoreError,
    TackroomError,
    TaskNotFound,
)
from tackroom.core.observation import Element, Observation
from tackroom.core.policy import (
    ExpertView,
    Policy,
    PolicyRequest,
    PolicyResponse,
    Sampling,
    ToolCall,
)
from tackroom.core.task import (
    CAPABILITIES,
    Environment,
    EnvironmentPool,
    Expert,
    SimplePool,
    StepResult,
    Suite,
    Task,
)

__all__ = [
    "Action", "Click", "ClickAt", "Edit", "Press", "Shell", "Submit", "Type", "TypeText",
    "action_from_dict", "Episode", "Outcome", "Turn", "episode_id", "ActionError",
    "ConfigError", "HarnessError", "InfraError", "PolicyError", "RecordStoreError",
    "TackroomError", "TaskNotFound", "Element", "Observation", "ExpertView", "Policy",
    "PolicyRequest", "PolicyResponse", "Sampling", "ToolCall", "CAPABILITIES", "Environment",
    "EnvironmentPool", "Expert", "SimplePool", "StepResult", "Suite", "Task",
]
