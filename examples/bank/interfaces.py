"""The bank's grain interfaces: what a client calls, without the grains' implementation.

A client imports this module only (``examples/bank/run.py``); the silo hosts
``examples.bank.grains``, whose classes implement these interfaces.
"""

from __future__ import annotations

from typing import Protocol

from orleanspy import GrainInterface, grain_type


class InsufficientFundsError(Exception):
    """A withdrawal or transfer asked for more than the balance."""

    def __init__(self, account: str, balance: int, amount: int) -> None:
        super().__init__(account, balance, amount)
        self.account, self.balance, self.amount = account, balance, amount

    def __str__(self) -> str:
        return f"account {self.account} has {self.balance}, cannot take {self.amount}"


@grain_type("Account")
class IAccount(GrainInterface, Protocol):
    """One bank account, keyed by its owner's name."""

    async def deposit(self, amount: int, memo: str = "deposit") -> int:
        """Add ``amount`` (> 0); returns the new balance."""
        ...

    async def withdraw(self, amount: int, memo: str = "withdrawal") -> int:
        """Take ``amount``; raises InsufficientFundsError beyond the balance."""
        ...

    async def balance(self) -> int: ...

    async def history(self) -> list[tuple[str, int]]:
        """Every movement as (memo, signed amount), oldest first."""
        ...


@grain_type("Transfers")
class ITransfers(GrainInterface, Protocol):
    """Moves money between accounts."""

    async def transfer(self, source: str, target: str, amount: int) -> tuple[int, int]:
        """Withdraw from ``source``, deposit to ``target``; returns both new balances."""
        ...
