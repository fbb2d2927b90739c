import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().copy())])
            for r in requests]

    def finalize(self):
        raise RuntimeError("py_finalize_error: finalize exploded (token c41e)")
