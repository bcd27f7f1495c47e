"""RotaryEmbedding (opset 23): rotary positional embedding (RoPE, Su et al.,
https://arxiv.org/abs/2104.09864). The first ``rotary_embedding_dim`` features of each head
are split into halves (or even/odd pairs when ``interleaved``) x1, x2 and rotated:
real = cos·x1 - sin·x2, imag = sin·x1 + cos·x2, with cos and sin gathered from the caches
by ``position_ids`` (or given per batch and position).
https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("RotaryEmbedding")
class RotaryEmbedding(ReferenceOp):
    defaults = {"interleaved": 0, "num_heads": None, "rotary_embedding_dim": 0}

    # -- layout ----------------------------------------------------------------------
    def _to_bshd(self, X):
        """X as (batch, sequence, heads, head_size)."""
        if X.ndim == 4:
            return X.transpose(0, 2, 1, 3)
        if X.ndim != 3:
            raise ShapeError(f"{self.op_type}: X must be 4-D (batch, heads, sequence, "
                             f"head_size) or 3-D (batch, sequence, hidden), got {X.shape}")
        heads = self.attr("num_heads")
        if not heads or X.shape[2] % heads:
            raise Deep500Error(f"{self.op_type}: a 3-D X (shape {X.shape}) needs the attribute "
                               f"num_heads, a divisor of its hidden size {X.shape[2]}; got "
                               f"num_heads={heads}")
        return X.reshape(X.shape[0], X.shape[1], heads, X.shape[2] // heads)

    @staticmethod
    def _from_bshd(Y, shape):
        if len(shape) == 4:
            return Y.transpose(0, 2, 1, 3)
        return Y.reshape(shape)

    def _rotary_dim(self, head_size: int) -> int:
        dim = self.attr("rotary_embedding_dim") or head_size
        if dim > head_size or dim % 2:
            raise ShapeError(f"{self.op_type}: rotary_embedding_dim={dim} must be even and at "
                             f"most the head size {head_size}")
        return dim

    def _caches(self, x, cos_cache, sin_cache, position_ids, half):
        """cos and sin as (batch, sequence, 1, half)."""
        batch, sequence = x.shape[:2]
        for name, cache in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
            if cache.shape[-1] != half:
                raise ShapeError(f"{self.op_type}: the last dimension of {name} (shape "
                                 f"{cache.shape}) must be rotary_embedding_dim/2 = {half}")
        if position_ids is not None:
            if np.shape(position_ids) != (batch, sequence):
                raise ShapeError(f"{self.op_type}: position_ids must have shape ({batch}, "
                                 f"{sequence}), got {np.shape(position_ids)}")
            if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
                raise ShapeError(f"{self.op_type}: with position_ids, cos_cache and sin_cache "
                                 f"must be (max_position_id_plus_1, {half}), got "
                                 f"{cos_cache.shape} and {sin_cache.shape}")
            if position_ids.size and (position_ids.min() < 0
                                      or position_ids.max() >= cos_cache.shape[0]):
                raise ShapeError(f"{self.op_type}: position_ids must lie in [0, "
                                 f"{cos_cache.shape[0]}) (the caches' rows), got values in "
                                 f"[{position_ids.min()}, {position_ids.max()}]")
            cos, sin = cos_cache[position_ids], sin_cache[position_ids]
        else:
            expected = (batch, sequence, half)
            if cos_cache.shape != expected or sin_cache.shape != expected:
                raise ShapeError(f"{self.op_type}: without position_ids, cos_cache and "
                                 f"sin_cache must be {expected}, got {cos_cache.shape} and "
                                 f"{sin_cache.shape}")
            cos, sin = cos_cache, sin_cache
        return cos[:, :, None, :], sin[:, :, None, :]

    def _split(self, rotated):
        if self.attr("interleaved"):
            return rotated[..., 0::2], rotated[..., 1::2]
        half = rotated.shape[-1] // 2
        return rotated[..., :half], rotated[..., half:]

    def _merge(self, a, b):
        if self.attr("interleaved"):
            return np.stack((a, b), axis=-1).reshape(a.shape[:-1] + (2 * a.shape[-1],))
        return np.concatenate((a, b), axis=-1)

    def _prepare(self, X, cos_cache, sin_cache, position_ids):
        x = self._to_bshd(X)
        dim = self._rotary_dim(x.shape[3])
        cos, sin = self._caches(x, cos_cache, sin_cache, position_ids, dim // 2)
        return x, dim, cos, sin

    # -- operator --------------------------------------------------------------------
    def forward(self, X, cos_cache, sin_cache, position_ids=None):
        x, dim, cos, sin = self._prepare(X, cos_cache, sin_cache, position_ids)
        x1, x2 = self._split(x[..., :dim])
        rotated = self._merge(cos * x1 - sin * x2, sin * x1 + cos * x2)
        y = np.concatenate((rotated, x[..., dim:]), axis=-1).astype(X.dtype, copy=False)
        return np.ascontiguousarray(self._from_bshd(y, X.shape))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, cos_cache, sin_cache, position_ids = (list(fwd_inputs) + [None])[:4]
        x, dim, cos, sin = self._prepare(X, cos_cache, sin_cache, position_ids)
        dY = grads[0] if grads[0] is not None else np.zeros_like(X)
        dy = self._to_bshd(dY)
        d_real, d_imag = self._split(dy[..., :dim])
        x1, x2 = self._split(x[..., :dim])
        dx = np.concatenate((self._merge(cos * d_real + sin * d_imag,
                                         cos * d_imag - sin * d_real), dy[..., dim:]), axis=-1)
        dX = np.ascontiguousarray(self._from_bshd(dx.astype(X.dtype, copy=False), X.shape))
        # Summed over heads: (batch, sequence, half).
        d_cos = np.sum(x1 * d_real + x2 * d_imag, axis=2)
        d_sin = np.sum(x1 * d_imag - x2 * d_real, axis=2)
        if position_ids is not None:
            d_cos_cache = np.zeros_like(cos_cache)
            d_sin_cache = np.zeros_like(sin_cache)
            np.add.at(d_cos_cache, position_ids, d_cos.astype(cos_cache.dtype))
            np.add.at(d_sin_cache, position_ids, d_sin.astype(sin_cache.dtype))
        else:
            d_cos_cache = d_cos.astype(cos_cache.dtype)
            d_sin_cache = d_sin.astype(sin_cache.dtype)
        return [dX, d_cos_cache, d_sin_cache, None]
