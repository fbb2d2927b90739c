import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

# Module-level code: Triton runs auto_complete_config in a process of its own, so this runs
# once for auto-complete and once more for the load. Each run leaves a line in IMPORTS.
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "IMPORTS"), "a") as _f:
    _f.write("import\n")


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        if pb_utils.get_output_config_by_name(config, "OUTPUT0") is None:
            raise pb_utils.TritonModelException(
                "model config of 'ac_complete' has no output 'OUTPUT0'")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * np.float32(2))])
            for r in requests]
