"""The README's layer and training-loop examples, run verbatim so the README cannot drift."""
import numpy as np

CUSTOM_LAYER = '''
import numpy as np
import minflux as mf
from minflux.testing import check_grad

@mf.elementwise
def highway_mix(h, t, x):                 # one fused kernel: gate, tanh and blend
    gate = mf.sigmoid(t)
    return gate * mf.tanh(h) + (1.0 - gate) * x

class Highway:                            # a plain class: its arrays are its parameters
    def __init__(self, dim, rng):
        self.W = mf.nn.init.glorot_uniform(rng, dim, 2 * dim)
        self.b = np.zeros(2 * dim, np.float32)

    def __call__(self, x):
        h, t = mf.split(x @ self.W + self.b, 2, axis=-1)
        return highway_mix(h, t, x)

layer = Highway(4, np.random.default_rng(0))
check_grad(lambda m, x: mf.sum(m(x) ** 2), layer, np.ones((3, 4)))   # float64 finite differences
'''

TRAINING_LOOP = '''
import numpy as np
import minflux as mf

rng = np.random.default_rng(0)
model = mf.nn.Chain(mf.nn.Dense(2, 32, mf.tanh, rng=rng), mf.nn.Dense(32, 1, rng=rng))
opt_state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(1e-2)), model)
x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
y = x[:, :1] * x[:, 1:]                                  # learn a product

def loss_fn(model, x, y):
    return mf.mean((model(x) - y) ** 2)

for step in range(400):
    loss, (grads, _, _) = mf.withgradient(loss_fn, model, x, y)
    mf.optim.update(opt_state, model, grads)              # arrays and state change in place
mf.save("checkpoint.h5", model=model, opt_state=opt_state, step=step + 1)
'''

RESUME = '''
model = mf.nn.Chain(mf.nn.Dense(2, 32, mf.tanh, rng=rng), mf.nn.Dense(32, 1, rng=rng))
opt_state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(1e-2)), model)
meta = mf.load("checkpoint.h5", model=model, opt_state=opt_state)   # checks names, shapes, dtypes
print(meta["step"], model)
'''


def test_custom_layer_example_is_short_and_its_gradient_checks():
    class_lines = CUSTOM_LAYER.split("class Highway")[1].split("\nlayer = ")[0].strip().splitlines()
    assert len(class_lines) < 15
    namespace = {}
    exec(CUSTOM_LAYER, namespace)
    layer = namespace["layer"]
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    h, t = np.split(x @ layer.W + layer.b, 2, axis=-1)
    gate = 1 / (1 + np.exp(-t))
    np.testing.assert_allclose(layer(x), gate * np.tanh(h) + (1 - gate) * x, rtol=1e-5)


def test_training_loop_example_learns_and_resumes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(TRAINING_LOOP, namespace)
    x, y, model = namespace["x"], namespace["y"], namespace["model"]
    initial = float(np.mean(y ** 2))                     # the loss of predicting zero
    assert float(namespace["loss"]) < 0.1 * initial
    exec(RESUME, namespace)
    assert capsys.readouterr().out.startswith("400 Chain(")
    np.testing.assert_array_equal(namespace["model"](x), model(x))
    assert namespace["opt_state"].layers[0].W.state[1][2] == 400
