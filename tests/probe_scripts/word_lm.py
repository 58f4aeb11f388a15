"""A script shaped like pytorch/examples' word_language_model (no Cockpit in it): an LSTM over a time-major
stream [bptt, batch], a hand-written SGD update (no optimizer object), an evaluation after each epoch under
eval() and no_grad, and the whole model saved with torch.save(model, f) when the validation loss improves.
--defect no-zero-grad drops model.zero_grad()."""

import argparse
import math
import os

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int = 16, nhid: int = 32, nlayers: int = 2, dropout: float = 0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, inp: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        emb = self.drop(self.encoder(inp))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = next(self.parameters())
        return w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid)


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    n = data.size(0) // bsz
    return data[: n * bsz].view(bsz, -1).t().contiguous()  # [time, batch]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="wlm")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5.0)
    ap.add_argument("--bptt", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--defect", default="", choices=["", "no-zero-grad"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log: list[str] = []
    torch.manual_seed(1111)
    ntokens = 40
    corpus = torch.randint(0, ntokens, (1000,), generator=torch.Generator().manual_seed(3))
    train_data, val_data = batchify(corpus[:800], a.batch_size), batchify(corpus[800:], 10)
    model = RNNModel(ntokens)
    criterion = nn.NLLLoss()

    def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        seq_len = min(a.bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)

    def evaluate(source: torch.Tensor) -> float:
        model.eval()
        total, hidden = 0.0, model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, a.bptt):
                data, targets = get_batch(source, i)
                output, hidden = model(data, hidden)
                total += len(data) * criterion(torch.log_softmax(output, -1).view(-1, ntokens), targets).item()
        return total / (len(source) - 1)

    lr, best = a.lr, None
    for epoch in range(1, a.epochs + 1):
        model.train()
        hidden = model.init_hidden(a.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, a.bptt)):
            data, targets = get_batch(train_data, i)
            hidden = tuple(h.detach() for h in hidden)
            if a.defect != "no-zero-grad":
                model.zero_grad()
            output, hidden = model(data, hidden)
            loss = criterion(torch.log_softmax(output, -1).view(-1, ntokens), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            log.append(f"epoch {epoch} batch {batch} loss {loss.item():.4f}\n")
        val = evaluate(val_data)
        line = f"end of epoch {epoch}: valid loss {val:.4f}, ppl {math.exp(val):.2f}"
        print(line, flush=True)
        log.append(line + "\n")
        if best is None or val < best:
            with open(os.path.join(a.out, "model.pt"), "wb") as f:
                torch.save(model, f)
            best = val
        else:
            lr /= 4.0
    with open(os.path.join(a.out, "log.txt"), "w") as f:
        f.writelines(log)


if __name__ == "__main__":
    main()
