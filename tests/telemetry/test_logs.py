from __future__ import annotations

import json
import logging

from orchestrator.telemetry.logs import JsonFormatter


def test_json_logs_mask_fields_that_look_secret() -> None:
    record = logging.LogRecord("orchestrator", logging.INFO, "f", 1, "login for %s", ("gpu-1",),
                               None)
    record.session_token = "abc.def"
    record.node_id = "gpu-1"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "login for gpu-1"
    assert (line["session_token"], line["node_id"]) == ("***", "gpu-1")
