"""Skill: API Orchestration. Mechanic: state-gated tool chain (look up account ids, transfer, pay a bill, then top up to an exact balance). Banking assistant."""
import random


class BankTransfersEnv(ToolUseEnv):
    SCENARIO = "You are a bank's assistant. Amounts are whole dollars."
    TOOLS = [
        {"type": "function", "function": {
            "name": "list_accounts", "description": "List a customer's accounts (id, type, balance).",
            "parameters": {"type": "object", "properties": {"owner": {"type": "string"}}, "required": ["owner"]}}},
        {"type": "function", "function": {
            "name": "get_balance", "description": "Current balance of one account.",
            "parameters": {"type": "object", "properties": {"account_id": {"type": "string"}}, "required": ["account_id"]}}},
        {"type": "function", "function": {
            "name": "transfer", "description": "Move money between two accounts.",
            "parameters": {"type": "object", "properties": {
                "from_account": {"type": "string"}, "to_account": {"type": "string"}, "amount": {"type": "integer"}},
                "required": ["from_account", "to_account", "amount"]}}},
        {"type": "function", "function": {
            "name": "list_bills", "description": "Unpaid bills of a customer.",
            "parameters": {"type": "object", "properties": {"owner": {"type": "string"}}, "required": ["owner"]}}},
        {"type": "function", "function": {
            "name": "pay_bill", "description": "Pay a bill in full from an account of the bill's owner.",
            "parameters": {"type": "object", "properties": {"bill_id": {"type": "string"}, "from_account": {"type": "string"}},
                           "required": ["bill_id", "from_account"]}}},
    ]

    def setup(self, rng):
        owners = rng.sample(["Maya Chen", "Omar Haddad", "Lena Vogel", "Tom Okafor", "Sara Lind"], 3)
        ids = rng.sample(range(1000, 10000), 6)
        accounts, bills = {}, {}
        for i, owner in enumerate(owners):
            accounts[f"AC-{ids[2 * i]}"] = {"owner": owner, "type": "checking", "balance": 10 * rng.randint(40, 90)}
            accounts[f"AC-{ids[2 * i + 1]}"] = {"owner": owner, "type": "savings", "balance": 10 * rng.randint(150, 400)}
            for payee in rng.sample(["City Power", "AquaWater", "NetFast", "Metro Gas"], 2):
                bills[f"B-{len(bills) + 101}"] = {"owner": owner, "payee": payee, "amount": rng.randint(35, 140), "paid_from": None}
        self._state = {"accounts": accounts, "bills": bills, "ledger": []}
        client = owners[0]
        chk, sav = [a for a, acc in accounts.items() if acc["owner"] == client]
        bill = rng.choice([b for b, info in bills.items() if info["owner"] == client])
        move = 10 * rng.randint(5, 20)
        low = accounts[chk]["balance"] - move - bills[bill]["amount"]
        target = low + 10 * rng.randint(10, 40)
        if target == accounts[chk]["balance"]:
            target += 10
        payee = bills[bill]["payee"]

        def balance(account):
            return self._state["accounts"][account]["balance"]

        def top_up():
            if not self.called("get_balance", account_id=chk):
                return "get_balance", {"account_id": chk}
            gap = target - balance(chk)
            if gap > 0:
                return "transfer", {"from_account": sav, "to_account": chk, "amount": gap}
            return "transfer", {"from_account": chk, "to_account": sav, "amount": -gap}

        return [
            {"text": f"Move ${move} from {client}'s checking account to their savings account.",
             "check": lambda: {"from": chk, "to": sav, "amount": move} in self._state["ledger"],
             "next_call": lambda: ("list_accounts", {"owner": client}) if not self.called("list_accounts", owner=client)
             else ("transfer", {"from_account": chk, "to_account": sav, "amount": move})},
            {"text": f"Pay {client}'s {payee} bill from their checking account.",
             "check": lambda: self._state["bills"][bill]["paid_from"] == chk,
             "next_call": lambda: ("list_bills", {"owner": client}) if not self.called("list_bills", owner=client)
             else ("pay_bill", {"bill_id": bill, "from_account": chk})},
            {"text": f"Now move money between {client}'s savings and checking so that checking holds exactly ${target}.",
             "check": lambda: balance(chk) == target and self._state["bills"][bill]["paid_from"] == chk,
             "next_call": top_up},
        ]

    def _account(self, account_id):
        if account_id not in self._state["accounts"]:
            raise ValueError(f"no account with id '{account_id}'")
        return self._state["accounts"][account_id]

    def tool_list_accounts(self, owner):
        found = [{"account_id": a, "type": acc["type"], "balance": acc["balance"]}
                 for a, acc in self._state["accounts"].items() if acc["owner"].lower() == owner.strip().lower()]
        if not found:
            raise ValueError(f"no customer named '{owner}'")
        return found

    def tool_get_balance(self, account_id):
        return {"account_id": account_id, "balance": self._account(account_id)["balance"]}

    def tool_transfer(self, from_account, to_account, amount):
        source, dest = self._account(from_account), self._account(to_account)
        if amount <= 0:
            raise ValueError("amount must be positive")
        if from_account == to_account:
            raise ValueError("the two accounts must differ")
        if source["balance"] < amount:
            raise ValueError(f"insufficient funds: {from_account} holds ${source['balance']}")
        source["balance"] -= amount
        dest["balance"] += amount
        self._state["ledger"].append({"from": from_account, "to": to_account, "amount": amount})
        return {"status": "ok", "from_balance": source["balance"], "to_balance": dest["balance"]}

    def tool_list_bills(self, owner):
        return [{"bill_id": b, "payee": info["payee"], "amount": info["amount"]}
                for b, info in self._state["bills"].items()
                if info["owner"].lower() == owner.strip().lower() and info["paid_from"] is None]

    def tool_pay_bill(self, bill_id, from_account):
        bill = self._state["bills"].get(bill_id)
        if bill is None or bill["paid_from"] is not None:
            raise ValueError(f"no unpaid bill '{bill_id}'")
        account = self._account(from_account)
        if account["owner"] != bill["owner"]:
            raise ValueError("the account must belong to the bill's owner")
        if account["balance"] < bill["amount"]:
            raise ValueError(f"insufficient funds: {from_account} holds ${account['balance']}")
        account["balance"] -= bill["amount"]
        bill["paid_from"] = from_account
        return {"status": "paid", "bill_id": bill_id, "new_balance": account["balance"]}
