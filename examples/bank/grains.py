"""Bank accounts with transfers: the grains of the example app, implementing
``examples.bank.interfaces``.

Start a silo hosting them with ``orleanspy silo start --app examples.bank.grains``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from examples.bank.interfaces import IAccount, InsufficientFundsError, ITransfers
from orleanspy import Grain, persistent_state, read_only, stateless_worker

__all__ = ["Account", "AccountState", "InsufficientFundsError", "Transfers"]


@dataclass
class AccountState:
    balance: int = 0
    history: list[tuple[str, int]] = field(default_factory=list)


class Account(Grain, IAccount):
    """One bank account; its balance is durable (SQLite by default in a CLI silo)."""

    state = persistent_state(AccountState)

    async def deposit(self, amount: int, memo: str = "deposit") -> int:
        if amount <= 0:
            raise ValueError(f"deposit amount must be positive, got {amount}")
        self.state.value.balance += amount
        self.state.value.history.append((memo, amount))
        await self.state.write()
        return self.state.value.balance

    async def withdraw(self, amount: int, memo: str = "withdrawal") -> int:
        balance = self.state.value.balance
        if amount > balance:
            raise InsufficientFundsError(str(self.key), balance, amount)
        self.state.value.balance -= amount
        self.state.value.history.append((memo, -amount))
        await self.state.write()
        return self.state.value.balance

    @read_only
    async def balance(self) -> int:
        return self.state.value.balance

    @read_only
    async def history(self) -> list[tuple[str, int]]:
        return list(self.state.value.history)


@stateless_worker(max_local=4)
class Transfers(Grain, ITransfers):
    """Moves money between accounts; stateless, so several run side by side."""

    async def transfer(self, source: str, target: str, amount: int) -> tuple[int, int]:
        src = self.get_grain(IAccount, source)
        dst = self.get_grain(IAccount, target)
        left = await src.withdraw(amount, f"to {target}")
        try:
            now = await dst.deposit(amount, f"from {source}")
        except Exception:
            await src.deposit(amount, f"refund of transfer to {target}")
            raise
        return left, now
