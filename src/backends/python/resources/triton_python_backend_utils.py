"""vramd's ``triton_python_backend_utils`` (what Triton's model.py calls ``pb_utils``).

This is the pure-Python half of the module.  It follows the behaviour of
Triton's python_backend helpers so that an unchanged ``model.py`` works:

* BYTES tensor (de)serialisation: each element is a little-endian ``uint32``
  length followed by that many bytes, elements in C order.
* Lookups of tensors by name on requests/responses, and of input/output
  entries by name in a model-config dict.
* Triton <-> numpy data type maps (no BF16: numpy has no bfloat16).
* ``ModelConfig``: the object handed to ``auto_complete_config``.
* Request/response flag constants.

Helpers that take a tensor, request or response use only the Triton methods
(``name()``, ``inputs()``, ``output_tensors()``), so any object that has them
works.

The classes and functions implemented in C++ (``Tensor``,
``InferenceRequest``, ``InferenceResponse``, ``Logger``, ...) come from the
embedded module ``c_python_backend_utils`` and are imported at the end of
this file when that module exists.  Outside the server (plain pytest) it does
not exist and only the pure-Python part is defined.
"""

import copy
import json
import struct

import numpy as np

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# --------------------------------------------------------------------------
# Data types
# --------------------------------------------------------------------------

# Model-config data_type string -> numpy type.  TYPE_BOOL maps to the Python
# builtin ``bool`` (as in Triton); there is no TYPE_BF16 entry.
TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numeric value -> numpy type.  14 (BF16) and anything
# else (0 = INVALID) have no numpy type.
_TRITON_CODE_TO_NUMPY = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}

# Checked in this order with ``==``, so a numpy dtype (np.dtype("float32"))
# and a numpy scalar type (np.float32) both match.  BYTES accepts both
# np.object_ and np.bytes_.
_NUMPY_TO_TRITON_CODE = (
    (np.bool_, 1),
    (np.uint8, 2),
    (np.uint16, 3),
    (np.uint32, 4),
    (np.uint64, 5),
    (np.int8, 6),
    (np.int16, 7),
    (np.int32, 8),
    (np.int64, 9),
    (np.float16, 10),
    (np.float32, 11),
    (np.float64, 12),
    (np.object_, 13),
    (np.bytes_, 13),
)


def triton_to_numpy_type(data_type):
    """Numpy type for a TRITONSERVER_DataType value, or None (e.g. BF16=14)."""
    try:
        return _TRITON_CODE_TO_NUMPY.get(data_type)
    except TypeError:  # unhashable argument: not a data type code
        return None


def numpy_to_triton_type(data_type):
    """TRITONSERVER_DataType value for a numpy dtype or type, or None."""
    for np_type, code in _NUMPY_TO_TRITON_CODE:
        if data_type == np_type:
            return code
    return None


def triton_string_to_numpy(triton_type_string):
    """Numpy type for a model-config data_type string such as "TYPE_FP32".

    Raises KeyError for a string without a numpy type (e.g. "TYPE_BF16").
    """
    return TRITON_STRING_TO_NUMPY[triton_type_string]


# --------------------------------------------------------------------------
# BYTES tensors
# --------------------------------------------------------------------------

_LEN = struct.Struct("<I")


def serialize_byte_tensor(input_tensor):
    """Serialise a BYTES numpy array to length-prefixed bytes, in C order.

    * Size 0: returns ``()`` (an empty tuple, as Triton does).
    * dtype np.object_: an element that is exactly ``bytes`` is used as is;
      any other element is ``str(element).encode("utf-8")``.
    * dtype np.bytes_ ("S<n>"): elements are used as is (numpy drops
      trailing NUL bytes of fixed-width strings, so prefer np.object_).
    * Any other dtype: returns None.
    """
    if input_tensor.size == 0:
        return ()

    is_object = input_tensor.dtype == np.object_
    if not is_object and input_tensor.dtype.type != np.bytes_:
        return None

    parts = []
    for element in input_tensor.ravel(order="C").tolist():
        if is_object and type(element) is not bytes:
            element = str(element).encode("utf-8")
        parts.append(_LEN.pack(len(element)))
        parts.append(element)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    """Parse length-prefixed bytes into a 1-D np.object_ array of ``bytes``.

    A truncated buffer raises ``struct.error``.
    """
    elements = []
    offset = 0
    total = len(encoded_tensor)
    while offset < total:
        (length,) = _LEN.unpack_from(encoded_tensor, offset)
        offset += _LEN.size
        (element,) = struct.unpack_from("<%ds" % length, encoded_tensor, offset)
        offset += length
        elements.append(element)
    result = np.empty(len(elements), dtype=np.object_)
    result[:] = elements
    return result


# --------------------------------------------------------------------------
# Lookups
# --------------------------------------------------------------------------


def get_input_tensor_by_name(inference_request, name):
    """The input tensor of ``inference_request`` named ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    """The output tensor of ``inference_response`` named ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _config_entry_by_name(model_config, section, name):
    if section in model_config:
        for entry in model_config[section]:
            if entry["name"] == name:
                return entry
    return None


def get_input_config_by_name(model_config, name):
    """The ``input`` entry (dict) of a model-config dict named ``name``, or None."""
    return _config_entry_by_name(model_config, "input", name)


def get_output_config_by_name(model_config, name):
    """The ``output`` entry (dict) of a model-config dict named ``name``, or None."""
    return _config_entry_by_name(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config):
    """``model_config["model_transaction_policy"]["decoupled"]``, else False."""
    policy = model_config.get("model_transaction_policy")
    if policy is None:
        return False
    return policy.get("decoupled", False)


# --------------------------------------------------------------------------
# auto_complete_config
# --------------------------------------------------------------------------


class ModelConfig:
    """The model configuration handed to ``auto_complete_config``.

    Built from the model configuration as a JSON string.  Only
    max_batch_size, the scheduler (dynamic batching), inputs, outputs and
    the model transaction policy can be changed, and only in ways that do
    not contradict what the configuration already says; a contradiction
    raises ValueError with Triton's message.
    """

    _INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
    _OUTPUT_PROPERTIES = ("name", "data_type", "dims")

    def __init__(self, model_config):
        if isinstance(model_config, dict):
            self._model_config = copy.deepcopy(model_config)
        else:
            self._model_config = json.loads(model_config)

    def as_dict(self):
        """The model configuration as a dict."""
        return self._model_config

    def _name(self):
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size):
        """Set max_batch_size.

        Raises ValueError if the configuration already specifies a larger
        value.
        """
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size {}, but in "
                "auto-complete-config function for model '{}' specified "
                "max_batch_size {}".format(current, self._name(), max_batch_size)
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        """Choose dynamic batching as the scheduler (no-op if already chosen).

        Raises ValueError if sequence batching or ensemble scheduling is set.
        """
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    "Configuration specified scheduling_choice as '{}', but "
                    "auto-complete-config function for model '{}' tries to "
                    "set scheduling_choice as 'dynamic_batching'".format(
                        scheduler, self._name()
                    )
                )
        if "dynamic_batching" not in self._model_config:
            self._model_config["dynamic_batching"] = {}

    def _add_tensor(self, kind, tensor, allowed, allowed_text):
        # Same checks, in the same order, as Triton.  The unknown-property
        # message names the tensor, so (as in Triton) an entry with an
        # unknown property and no name raises KeyError('name').
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    "{} '{}' in auto-complete-config function for model '{}' "
                    "contains property other than {}.".format(
                        kind, tensor["name"], self._name(), allowed_text
                    )
                )
        if "name" not in tensor:
            raise ValueError(
                "{} in auto-complete-config function for model '{}' is "
                "missing 'name' property.".format(kind, self._name())
            )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    "{} '{}' in auto-complete-config function for model '{}' "
                    "is missing '{}' property.".format(
                        kind, tensor["name"], self._name(), required
                    )
                )

        entries = self._model_config.setdefault(kind, [])
        for existing in entries:
            if existing.get("name") != tensor["name"]:
                continue
            existing_type = existing.get("data_type", "TYPE_INVALID")
            if existing_type != "TYPE_INVALID" and existing_type != tensor["data_type"]:
                raise ValueError(
                    "unable to load model '{}', configuration expects "
                    "datatype {} for {} '{}', model provides {}".format(
                        self._name(),
                        existing_type,
                        kind,
                        tensor["name"],
                        tensor["data_type"],
                    )
                )
            existing_dims = existing.get("dims")
            if existing_dims and existing_dims != tensor["dims"]:
                raise ValueError(
                    "model '{}', tensor '{}': the model expects dims {} but "
                    "the model configuration specifies dims {}".format(
                        self._name(),
                        tensor["name"],
                        str(tensor["dims"]),
                        str(existing_dims),
                    )
                )
            if (
                kind == "input"
                and "optional" in existing
                and "optional" in tensor
                and existing["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    "model '{}', tensor '{}': the model expects optional {} "
                    "but the model configuration specifies optional {}".format(
                        self._name(),
                        tensor["name"],
                        str(tensor["optional"]),
                        str(existing["optional"]),
                    )
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if kind == "input" and "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        entries.append(tensor)

    def add_input(self, input):
        """Add an input, or complete the configuration's input of that name.

        ``input`` is a dict with 'name', 'data_type' (e.g. "TYPE_FP32") and
        'dims', and optionally 'optional'.
        """
        self._add_tensor(
            "input",
            input,
            self._INPUT_PROPERTIES,
            "'name', 'data_type', 'dims' and 'optional'",
        )

    def add_output(self, output):
        """Add an output, or complete the configuration's output of that name.

        ``output`` is a dict with 'name', 'data_type' and 'dims'.
        """
        self._add_tensor(
            "output",
            output,
            self._OUTPUT_PROPERTIES,
            "'name', 'data_type' and 'dims'",
        )

    def set_model_transaction_policy(self, transaction_policy_dict):
        """Set model_transaction_policy; the only property is 'decoupled'.

        Raises ValueError for another property, or if 'decoupled' is already
        set to a different value.
        """
        for key in transaction_policy_dict.keys():
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config "
                    "function for model '{}' contains property other than "
                    "'decoupled'.".format(self._name())
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in "
                    "auto-complete-config for model '{}', which is already "
                    "set to '{}'.".format(self._name(), str(policy["decoupled"]))
                )
            policy["decoupled"] = wanted


# --------------------------------------------------------------------------
# The C++ half (inside the server only)
# --------------------------------------------------------------------------

_C_NAMES = (
    "TritonError",
    "TritonModelException",
    "Tensor",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "MetricFamily",
    "Metric",
    "PreferredMemory",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_MEMORY_CPU",
    "load_model",
    "unload_model",
    "is_model_ready",
    "get_model_dir",
    "get_input_tensor_by_name",  # the same lookup, in C++ (the Python one above is its fallback)
)

try:
    import c_python_backend_utils as _c_utils
except ImportError:
    _c_utils = None

if _c_utils is not None:
    for _c_name in _C_NAMES:
        if hasattr(_c_utils, _c_name):
            globals()[_c_name] = getattr(_c_utils, _c_name)
    del _c_name
del _c_utils
