import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_info("py_logger initialized as " + args["model_instance_name"])

    def execute(self, requests):
        logger = pb_utils.Logger
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            text = t.reshape(-1)[0].decode()
            logger.log_info("py_logger info " + text)
            logger.log_warn("py_logger warning " + text)
            logger.log_error("py_logger error " + text)
            logger.log("py_logger via-log " + text, logger.INFO)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", t.copy())]))
        return responses
