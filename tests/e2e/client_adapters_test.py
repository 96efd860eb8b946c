"""Agent frameworks as real clients of `pagoda serve`, unchanged: LangChain's ChatOpenAI and LiteLLM
(both from the Python registry, requirements/test.txt) each run a structured-output call and a
tool call against SmolLM2-135M-Instruct, the default model."""
import json
import os

import jsonschema
import pytest

from conftest import CHAT_MODEL, Server

# LiteLLM reads its model price map from the network at import unless told to use its own copy;
# the tests run offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CHAT = "SmolLM2-135M-Instruct.Q4_1"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}
CITY_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                "population": {"type": "integer", "minimum": 0}},
               "required": ["name", "population"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server():
    s = Server(CHAT_MODEL, "--max-model-len", 2048, "--max-num-seqs", 4)
    yield s
    s.kill()


# ---- LangChain ----

def chat_openai(server, **kw):
    from langchain_openai import ChatOpenAI
    return ChatOpenAI(base_url=server.url + "/v1", api_key="none", model=CHAT, temperature=0, max_tokens=80,
                      max_retries=0, timeout=120, **kw)


def test_langchain_structured_output(server):
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=20)
        population: int = Field(ge=0)

    llm = chat_openai(server)
    for method in ("json_schema", "function_calling"):
        out = llm.with_structured_output(City, method=method, strict=True).invoke(
            "Name a large city and its population.")
        assert isinstance(out, City), (method, out)
        assert out.name and out.population >= 0


def test_langchain_tool_call_and_loop(server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return f"It is sunny in {city}."

    llm = chat_openai(server)
    question = HumanMessage("What is the weather in Paris? Use the tool.")
    ai = llm.bind_tools([get_weather], tool_choice="required").invoke([question])
    assert len(ai.tool_calls) >= 1, ai
    call = ai.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str) and call["id"]
    # Streaming: the tool-call chunks add up to the same call.
    merged = None
    for chunk in llm.bind_tools([get_weather], tool_choice="get_weather").stream([question]):
        merged = chunk if merged is None else merged + chunk
    assert merged.tool_calls and merged.tool_calls[0]["name"] == "get_weather"
    assert merged.tool_calls[0]["args"] == call["args"]
    # The loop: the tool's result goes back, the model answers in text.
    answer = llm.bind_tools([get_weather]).invoke(
        [question, ai, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])])
    assert isinstance(answer.content, str) and (answer.content or answer.tool_calls)


# ---- LiteLLM ----

def litellm_completion(server, **kw):
    import litellm
    litellm.telemetry = False
    return litellm.completion(model="openai/" + CHAT, api_base=server.url + "/v1", api_key="none", temperature=0,
                              max_tokens=80, num_retries=0, timeout=120, **kw)


def test_litellm_structured_output(server):
    r = litellm_completion(server, messages=[{"role": "user", "content": "Name a large city and its population."}],
                           response_format={"type": "json_schema",
                                            "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}})
    jsonschema.validate(json.loads(r.choices[0].message.content), CITY_SCHEMA)


def test_litellm_tool_call(server):
    r = litellm_completion(server, messages=[{"role": "user", "content": "What is the weather in Rome?"}],
                           tools=[WEATHER_TOOL], tool_choice="required")
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and calls[0].id
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER_TOOL["function"]["parameters"])
    assert r.choices[0].finish_reason == "tool_calls"
