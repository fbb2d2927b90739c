import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if int(value[0]) < 0:
                raise RuntimeError("py_exec_error: execute exploded on %d" % int(value[0]))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", value.copy())]))
        return responses
