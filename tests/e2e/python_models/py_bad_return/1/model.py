import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()[0])
        good = [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().copy())])
            for r in requests]
        if mode == 0:
            return "not a list"
        if mode == 1:
            return good + good
        if mode == 2:
            return ["a string"] * len(requests)
        return good
