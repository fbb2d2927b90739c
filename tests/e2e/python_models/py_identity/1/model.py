import numpy as np
import triton_python_backend_utils as pb_utils

SUFFIXES = ["FP32", "INT64", "BOOL", "FP16", "BYTES"]


class TritonPythonModel:
    def initialize(self, args):
        import json
        config = json.loads(args["model_config"])
        self.dtypes = {}
        for suffix in SUFFIXES:
            out = pb_utils.get_output_config_by_name(config, "OUT_" + suffix)
            self.dtypes[suffix] = pb_utils.triton_string_to_numpy(out["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for suffix in SUFFIXES:
                tensor = pb_utils.get_input_tensor_by_name(request, "IN_" + suffix)
                array = tensor.as_numpy()
                if suffix == "BYTES":
                    # A copy as an np.object_ array of bytes, as Triton's models build them.
                    out = np.array([bytes(x) for x in array.reshape(-1)],
                                   dtype=np.object_).reshape(array.shape)
                else:
                    out = array.astype(self.dtypes[suffix])
                outputs.append(pb_utils.Tensor("OUT_" + suffix, out))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
