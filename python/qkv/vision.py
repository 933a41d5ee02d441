"""qkv.vision — image classification on Fashion-MNIST with a Vision Transformer or a Point
Transformer, as `qkv train vit`, `qkv train point` and `qkv classify` do it, with NumPy
arrays in and out.

    import qkv.vision as vision
    result = vision.train("data", "vit-model", epochs=20)      # the Fashion-MNIST directory
    c = vision.Classifier("vit-model")
    images = vision.read_images("data/t10k-images-idx3-ubyte.gz")   # uint8 (10000, 28, 28)
    c.classify(images[:2])       # -> [{"label": 9, "class": "Ankle boot", "score": 0.97}, ...]
    c.predict_proba(images)      # -> float32 (10000, 10), rows summing to 1
    c.rollout(images[0])         # -> float32 (7, 7): the class token's attention rollout

    vision.train("data", "point-model", model="point")   # points sampled from the inked pixels
    vision.Classifier("point-model").point_view(images[0])   # its points and their attention

The data directory is what `scripts/fetch_data.sh fashion-mnist DIR` writes: the four
gzipped IDX files of Xiao, Rasul & Vollgraf (2017). Training uses the first 55,000 training
images, validation (which picks the epoch kept) the last 5,000, and the test set is scored
once at the end (load_fashion_mnist gives the same split as arrays).

Images are uint8 pixels (N, 28, 28) or one (28, 28), 0 = black, as read_images gives them
and the files hold them; the model normalises them itself ((p / 255 - PIXEL_MEAN) /
PIXEL_STD). Float images are a TypeError rather than a guess at their scale: convert with
``(x * 255).round().astype(np.uint8)`` for 0..1 floats. CPU torch uint8 tensors are
accepted too.

For a torch twin: TrainingBatches(images, labels, seed=s).get(epoch, step) (or
training_batch) gives exactly the batches train() trains on, normalised and augmented, a
pure function of (seed, epoch, step), and .kept(epoch, step, patch_dropout) the patches
each image keeps under patch dropout; train() with train_limit=n trains on the first n
training images, i.e. load_fashion_mnist(data)["train"] sliced to [:n].

Bad input raises ValueError (TypeError for wrong types and dtypes), naming the argument
and what was wrong: a file that is not an image, images of another size, a directory that
holds another kind of model.
"""

import numpy as np

from . import _bool, _describe, _float, _is_torch, _path, _qkv, _ranged
from .training import _parsed

__all__ = ["train", "Classifier", "read_images", "read_labels", "load_fashion_mnist",
           "TrainingBatches", "training_batch", "steps_per_epoch", "CLASSES", "PIXEL_MEAN",
           "PIXEL_STD"]

CLASSES = _qkv._vision_classes        # Fashion-MNIST's class names, by label
PIXEL_MEAN = _qkv._vision_pixel_mean  # of the training images' p / 255 (float32)
PIXEL_STD = _qkv._vision_pixel_std

_SEED_LIMIT = (1 << 64) - 1
_DEFAULTS = _qkv._vision_defaults()


def _probability(value, fn, name):
    """A float in [0, 1] (TypeError for a non-number, ValueError outside or NaN)."""
    p = _float(value, fn, name)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{fn}: {name} must be in [0, 1], got {p}")
    return p


def _pixels(images, fn, name="images"):
    """uint8 pixels (N, H, W) or (H, W) -> (a C-contiguous uint8 (N, H, W) array, whether one
    image was given)."""
    if _is_torch(images):
        if images.device.type != "cpu":
            raise ValueError(f"{fn}: {name} must be on the CPU, got a tensor on {images.device}")
        images = images.detach().numpy()
    if not isinstance(images, np.ndarray):
        raise TypeError(f"{fn}: {name} must be a numpy.ndarray of uint8 pixels (N, H, W) or (H, W), "
                        f"got {_describe(images)}")
    if images.dtype != np.uint8:
        raise TypeError(f"{fn}: {name} must have dtype uint8 (pixels 0..255, 0 = black), got "
                        f"{images.dtype}; for 0..1 floats use (x * 255).round().astype(np.uint8)")
    if images.ndim not in (2, 3):
        raise ValueError(f"{fn}: {name} must be (N, H, W) or one image (H, W), got shape {images.shape}")
    one = images.ndim == 2
    return np.ascontiguousarray(images[None] if one else images), one


def _labels(labels, fn, count):
    if _is_torch(labels):
        labels = labels.detach().cpu().numpy()
    if not isinstance(labels, np.ndarray):
        raise TypeError(f"{fn}: labels must be a numpy.ndarray of integers (N,), got {_describe(labels)}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"{fn}: labels must have an integer dtype, got {labels.dtype}")
    if labels.shape != (count,):
        raise ValueError(f"{fn}: labels must be ({count},), one per image, got shape {labels.shape}")
    return labels.astype(np.int64)


def read_images(path, height=28, width=28):
    """An IDX image file (gzip or plain, as Fashion-MNIST ships them) or one PNG or PGM image
    -> uint8 (N, height, width). Every image must be height × width (0 = any size)."""
    fn = "read_images"
    return _qkv._vision_read_images(_path(path, fn, "path"), _ranged(height, fn, "height", 0, 1 << 20),
                                    _ranged(width, fn, "width", 0, 1 << 20))


def read_labels(path, count, classes=10):
    """An IDX label file (gzip or plain) -> int64 (count,); count is the number of images they
    label (len(images)), each label must be in [0, classes)."""
    fn = "read_labels"
    return _qkv._vision_read_labels(_path(path, fn, "path"), _ranged(count, fn, "count", 0, 1 << 32),
                                    _ranged(classes, fn, "classes", 1, 256))


def load_fashion_mnist(data, validation=5000):
    """The split train() uses: {"train", "validation", "test"}, each {"images" uint8
    (N, 28, 28), "labels" int64 (N,)}; validation is the last `validation` training images."""
    fn = "load_fashion_mnist"
    return _qkv._vision_load_fashion_mnist(_path(data, fn, "data"),
                                           _ranged(validation, fn, "validation", 0, 1 << 32))


def steps_per_epoch(images, batch=128):
    """Batches in an epoch of `images` training images: ceil(images / batch)."""
    fn = "steps_per_epoch"
    images, batch = _ranged(images, fn, "images", 0, 1 << 40), _ranged(batch, fn, "batch", 1, 1 << 20)
    return (images + batch - 1) // batch


class TrainingBatches:
    """The training batches of train() over the training images (uint8 (N, H, W)) and their
    labels (N,): get(epoch, step) -> (images float32 (B, 1, H, W), labels int64 (B,),
    indices int64 (B,) into the images). Epoch e's order is a shuffle seeded by (seed, e);
    batch `step` is its rows [step·batch, step·batch + batch) (the last one shorter),
    normalised, shifted by up to ±pad pixels (black fill), flipped left-right with
    probability 1/2 when flip, then with probability `erase` given one rectangle of 2–40%
    of the image set to the mean pixel (Random Erasing; the shifts and flips do not depend
    on erase). train()'s batches are those of pad=2, flip=True and train's erase."""

    def __init__(self, images, labels, batch=_DEFAULTS["batch"], seed=0, pad=_DEFAULTS["pad"],
                 flip=_DEFAULTS["flip"], erase=_DEFAULTS["erase"]):
        fn = "TrainingBatches"
        pixels, _ = _pixels(images, fn)
        if pixels.ndim != 3 or pixels.shape[0] == 0:
            raise ValueError(f"{fn}: images must hold at least one image, got shape {pixels.shape}")
        self.batch = _ranged(batch, fn, "batch", 1, 1 << 20)
        self.seed = _ranged(seed, fn, "seed", 0, _SEED_LIMIT)
        self.pad = _ranged(pad, fn, "pad", 0, 1024)
        self.flip = _bool(flip, fn, "flip")
        self.erase = _probability(erase, fn, "erase")
        self._b = _qkv._VisionBatches(pixels, _labels(labels, fn, pixels.shape[0]))
        self._shape = pixels.shape[1:]  # (H, W)
        self.steps_per_epoch = self._b.steps_per_epoch(self.batch)

    def get(self, epoch, step):
        fn = "TrainingBatches.get"
        epoch = _ranged(epoch, fn, "epoch", 0, 1 << 40)
        step = _ranged(step, fn, "step", 0, self.steps_per_epoch - 1)
        return self._b.get(self.seed, epoch, step, self.batch, self.pad, self.flip, self.erase)

    def kept(self, epoch, step, patch_dropout, patch_size=4):
        """The patches each image of batch (epoch, step) keeps when train() trains with
        patch_dropout (a ViT of patch_size × patch_size patches, N of them): int64 (B, K),
        each row K = N − round(patch_dropout · N) (at least 1) distinct patch indices in
        ascending order, row-major over the patch grid; None when every patch is kept. For a
        twin: its blocks see the class token and the tokens of these patches alone, each
        with its own patch's position."""
        fn = "TrainingBatches.kept"
        epoch = _ranged(epoch, fn, "epoch", 0, 1 << 40)
        step = _ranged(step, fn, "step", 0, self.steps_per_epoch - 1)
        patch_dropout = _float(patch_dropout, fn, "patch_dropout")
        if not 0 <= patch_dropout < 1:
            raise ValueError(f"{fn}: patch_dropout must be in [0, 1), got {patch_dropout}")
        patch_size = _ranged(patch_size, fn, "patch_size", 1, 1 << 20)
        height, width = self._shape
        if height % patch_size or width % patch_size:
            raise ValueError(f"{fn}: patch_size {patch_size} does not divide the {height}×{width} images")
        patches = (height // patch_size) * (width // patch_size)
        return self._b.kept(self.seed, epoch, step, self.batch, patches, patch_dropout)


def training_batch(images, labels, seed, epoch, step, batch=_DEFAULTS["batch"], pad=_DEFAULTS["pad"],
                   flip=_DEFAULTS["flip"], erase=_DEFAULTS["erase"]):
    """TrainingBatches(images, labels, batch, seed, pad, flip, erase).get(epoch, step), for one batch."""
    return TrainingBatches(images, labels, batch, seed, pad, flip, erase).get(epoch, step)


def train(data, out, model="vit", **options):
    """qkv.train(model, data=data, out=out, **options): a Vision Transformer (model="vit")
    or a Point Transformer (model="point") trained on the Fashion-MNIST directory `data` as
    `qkv train vit` / `qkv train point` trains it, writing the model directory `out`
    (config.json, model.safetensors: the weights of the epoch of best validation accuracy;
    checkpoint.safetensors). Each model takes only its own options, the CLI's
    (qkv.options("train vit") lists them, with their ranges and defaults).

    -> the result, the keys of `qkv train vit --json`: the loop's ("task", "steps",
    "interrupted", "stopped_early", "seconds", "items_per_s", "unit", "precision", "loss",
    "evaluations", "metric", "best_step", "best_score", "checkpoint"), then
    "validation_accuracy" (per epoch), "best_epoch" (1-based), "num_parameters", "out" and
    "test_accuracy" (of the best epoch's weights; absent when interrupted).
    """
    from .training import train as train_task
    if model not in ("vit", "point"):
        raise ValueError(f"vision.train: model must be 'vit' or 'point', got {model!r}")
    return train_task(model, data=data, out=out, **options)


class Classifier:
    """A model directory of `qkv train vit` or `qkv train point` / train().

    model: "vit" or "point"; config: the architecture (a ViT's {"image_size", "channels",
    "patch_size", "dim", "layers", "heads", "mlp_dim", "classes", "learned_positions",
    "shifted_patches"}, the
    config of qkv's _vit_forward; a point model's {"points", "patch_size", "neighbors", "dim", "blocks",
    "pos_mlp_hidden", "attn_mlp_hidden_mult", "head_hidden", "classes"}, that of
    _pt_forward); class_names: by label; report: training's record (epochs, accuracies, the
    command).
    """

    def __init__(self, directory):
        self._c = _qkv._VisionClassifier(_path(directory, "Classifier", "directory"))
        self.model = self._c.model
        self.config = self._c.config
        self.class_names = list(self._c.class_names)
        self.report = self._c.report

    @classmethod
    def load(cls, directory):
        """Classifier(directory), as qkv.load_model names it."""
        return cls(directory)

    def __call__(self, images, output_attentions=False):
        """uint8 images (N, H, W), or one (H, W) -> {"probabilities": float32 (N, classes)},
        and with output_attentions "attentions": a tuple of per-block (N, H, L, L) float32
        probabilities, Hugging Face's shapes, and "tokens" (L): a ViT's "[CLS]" and its
        patches "r0c0", "r0c1", ... (row-major), its heads H; a point model's points "pt0",
        ... with H = 1, row n point n's weights over its K neighbours (zero elsewhere).
        What `qkv run --image` shows."""
        fn = "Classifier"
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        pixels, _ = _pixels(images, fn)
        _, _, probs = self._c.classify(pixels, 256, False)
        out = {"probabilities": probs}
        if output_attentions:
            per_image = [self._c.attention(pixels, i) for i in range(pixels.shape[0])]
            out["tokens"] = list(per_image[0][0]) if per_image else []
            blocks = len(per_image[0][1]) if per_image else 0
            out["attentions"] = tuple(np.stack([layers[b] for _, layers in per_image])
                                      for b in range(blocks))
        return out

    def _predict(self, images, batch, tta, fn):
        pixels, one = _pixels(images, fn)
        o = _parsed("classify", batch=batch, tta=tta)  # `qkv classify`'s --batch and --tta
        labels, scores, probs = self._c.classify(pixels, o["batch"], o["tta"])
        return labels, scores, probs, one

    def classify(self, images, batch=None, tta=None):
        """uint8 images (N, H, W) -> one dict per image, {"label", "class", "score" (its
        probability)}, as `qkv classify --json` prints them; one image (H, W) -> one dict.
        tta (test-time augmentation, `qkv classify --tta`): each image's probabilities are the
        mean of its own and its left-right mirror image's, at two forwards per image. batch
        (images per forward, default 256) and tta are `qkv classify`'s (qkv.options("classify"))."""
        labels, scores, _, one = self._predict(images, batch, tta, "classify")
        out = [{"label": int(k), "class": self.class_names[int(k)], "score": float(s)}
               for k, s in zip(labels, scores)]
        return out[0] if one else out

    def predict(self, images, batch=None, tta=None):
        """The labels: int64 (N,), or an int for one image (H, W). tta: as classify's."""
        labels, _, _, one = self._predict(images, batch, tta, "predict")
        return int(labels[0]) if one else labels

    def predict_proba(self, images, batch=None, tta=None):
        """The softmax of the logits: float32 (N, classes), or (classes,) for one image; with
        tta the mean of the image's and its mirror image's."""
        _, _, probs, one = self._predict(images, batch, tta, "predict_proba")
        return probs[0] if one else probs

    def _one_image(self, images, index, fn):
        """(the pixels, the index of the image to show): images is one image (H, W), or
        (N, H, W) with `index`."""
        pixels, one = _pixels(images, fn)
        if index is None:
            if not one and pixels.shape[0] != 1:
                raise ValueError(f"{fn}: index is required for {pixels.shape[0]} images")
            index = 0
        return pixels, _ranged(index, fn, "index", 0, pixels.shape[0] - 1)

    def rollout(self, images, index=None):
        """The class token's attention rollout (Abnar & Zuidema 2020) over one image's
        patches: float32 (grid, grid), grid = 28 / patch_size, summing to at most 1. images:
        one image (H, W), or (N, H, W) with the index of the one to show."""
        pixels, index = self._one_image(images, index, "rollout")
        if self.model != "vit":
            raise ValueError(f"rollout: attention rollout is the ViT's; this is a {self.model!r} model (use point_view)")
        return self._c.rollout(pixels, index)

    def point_view(self, images, index=None):
        """What the point model reads of one image and what its last block attends to:
        {"points": float32 (N, 3) (x, y in [-1, 1] and the intensity in [0, 1] of the point's
        own pixel: columns 0, 1 and the window's centre of qkv's _pt_image_to_points with
        seed 0, counter 0 and the model's patch_size), "neighbors": int64 (N, K) each
        point's K nearest points, "weights": float32 (N, K) the attention it gives them (the
        per-channel softmax averaged over channels; rows sum to 1), "received": float32 (N,)
        the weight each point receives, / N}. images as for rollout."""
        pixels, index = self._one_image(images, index, "point_view")
        if self.model != "point":
            raise ValueError(f"point_view: this is a {self.model!r} model, not a point model (use rollout)")
        return self._c.point_view(pixels, index)
