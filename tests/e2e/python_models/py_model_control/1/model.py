import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def attempt(fn, *args, **kwargs):
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001 - the test reads the type and the text
        return {"raised": type(e).__name__, "message": str(e)}


def wait_ready(target, want, timeout=15.0):
    deadline = time.monotonic() + timeout
    while pb_utils.is_model_ready(target) != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# A model loaded from files this model passes to load_model (no repository holds it).
def config_for(name):
    return json.dumps({
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}]})
FROM_FILES_MODEL = b"""
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 3)])
            for r in requests]
"""


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "py_ctl_target")
            steps = [
                ["ready", attempt(pb_utils.is_model_ready, target)],
                ["ready_v1", attempt(pb_utils.is_model_ready, target, "1")],
                ["ready_v7", attempt(pb_utils.is_model_ready, target, "7")],
                ["ready_bad_version", attempt(pb_utils.is_model_ready, target, "one")],
                ["unload", attempt(pb_utils.unload_model, target)],
                ["not_ready_after_unload", wait_ready(target, False)],
                ["load", attempt(pb_utils.load_model, target)],
                ["ready_after_load", wait_ready(target, True)],
                ["load_missing", attempt(pb_utils.load_model, "no_such_model_ctl")],
                ["ready_missing", attempt(pb_utils.is_model_ready, "no_such_model_ctl")],
                ["load_files", attempt(pb_utils.load_model, "py_from_files", config_for("py_from_files"),
                                       {"file:1/model.py": FROM_FILES_MODEL})],
                ["files_ready", wait_ready("py_from_files", True)],
                ["files_without_config", attempt(pb_utils.load_model, "py_no_config", "",
                                                 {"file:1/model.py": FROM_FILES_MODEL})],
                ["files_bad_key", attempt(pb_utils.load_model, "py_bad_key", config_for("py_bad_key"),
                                          {"1/model.py": FROM_FILES_MODEL})],
                ["files_not_bytes", attempt(pb_utils.load_model, "py_not_bytes",
                                            config_for("py_not_bytes"), {"file:1/model.py": "text"})],
                ["files_escape", attempt(pb_utils.load_model, "py_escape", config_for("py_escape"),
                                         {"file:../outside.py": FROM_FILES_MODEL})],
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("STEPS", np.array([json.dumps(steps).encode()],
                                                  dtype=np.object_))]))
        return responses
