"""Identity in Python, written as for Triton's python backend: runs unchanged on either."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        pb_utils.Logger.log_info(
            "initialized instance {} ({})".format(
                args["model_instance_name"], args["model_instance_kind"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for input_name, output_name in (("INPUT0", "OUTPUT0"), ("INPUT1", "OUTPUT1")):
                tensor = pb_utils.get_input_tensor_by_name(request, input_name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(output_name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("finalized")
