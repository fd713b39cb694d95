"""A PyTorch model with a diffdsl layer, trained under torch.compile.

The model is rbf.dd (six radial basis functions whose centres and widths are parameters)
followed by a linear read-out; it learns f(x, y) = sin(2x) cos(y) from 256 points. The .dd
layer runs as one custom operator: torch.compile(fullgraph=True) traces it without a graph
break, and its backward (the vjp kernel) trains the centres and widths.

    python examples/bridges/torch_layer.py
"""

from pathlib import Path

import torch

import diffdsl
import diffdsl.torch

HERE = Path(__file__).resolve().parent


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rbf = diffdsl.torch.function(diffdsl.load(HERE / "rbf.dd"))
        self.centres = torch.nn.Parameter(torch.rand(6, 2, dtype=torch.float64) * 4 - 2)
        self.widths = torch.nn.Parameter(torch.ones(6, dtype=torch.float64))
        self.out = torch.nn.Linear(6, 1, dtype=torch.float64)

    def forward(self, points):  # points: (rows, 2), a batch for the .dd layer
        return self.out(self.rbf(points, c=self.centres, w=self.widths))[:, 0]


def compiled_loss(model: Model):
    """The mean squared error of `model`, compiled whole: fullgraph=True raises at a graph
    break, so the .dd layer must be traced as one operator."""
    @torch.compile(fullgraph=True)
    def loss_fn(points, target):
        return ((model(points) - target) ** 2).mean()
    return loss_fn


def main(steps: int = 200, model: Model | None = None, loss_fn=None) -> tuple[float, float]:
    torch.manual_seed(0)
    points = torch.rand(256, 2, dtype=torch.float64) * 4 - 2
    target = torch.sin(2 * points[:, 0]) * torch.cos(points[:, 1])
    model = Model() if model is None else model
    loss_fn = compiled_loss(model) if loss_fn is None else loss_fn
    optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
    first = None
    for step in range(steps):
        optimiser.zero_grad()
        loss = loss_fn(points, target)
        loss.backward()
        optimiser.step()
        first = loss.item() if first is None else first
        if step % 50 == 0:
            print(f"step {step:3d}: loss {loss.item():.5f}")
    last = loss_fn(points, target).item()
    print(f"loss {first:.4f} -> {last:.4f}")
    return first, last


if __name__ == "__main__":
    main()
