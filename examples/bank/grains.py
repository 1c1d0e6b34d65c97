"""Bank accounts with transfers: the grains of the example app.

Start a silo hosting them with ``orleanspy silo start --app examples.bank.grains``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orleanspy import Grain, persistent_state, read_only, stateless_worker


class InsufficientFundsError(Exception):
    """A withdrawal or transfer asked for more than the balance."""

    def __init__(self, account: str, balance: int, amount: int) -> None:
        super().__init__(account, balance, amount)
        self.account, self.balance, self.amount = account, balance, amount

    def __str__(self) -> str:
        return f"account {self.account} has {self.balance}, cannot take {self.amount}"


@dataclass
class AccountState:
    balance: int = 0
    history: list[tuple[str, int]] = field(default_factory=list)


class Account(Grain):
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
class Transfers(Grain):
    """Moves money between accounts; stateless, so several run side by side."""

    async def transfer(self, source: str, target: str, amount: int) -> tuple[int, int]:
        src = self.get_grain(Account, source)
        dst = self.get_grain(Account, target)
        left = await src.withdraw(amount, f"to {target}")
        try:
            now = await dst.deposit(amount, f"from {source}")
        except Exception:
            await src.deposit(amount, f"refund of transfer to {target}")
            raise
        return left, now
