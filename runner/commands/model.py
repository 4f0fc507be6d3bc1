"""``diffprobe model``: run the synthetic incident model (runner/model) under each defence, print
where each configuration stops each situation, and write its receipts as a bundle."""

from __future__ import annotations

from runner import errors, ui
from runner.commands import options
from runner.evidence import bundle
from runner.judge.observations import Case
from runner.evidence.receipts import Receipt
from runner.model import observe
from runner.model.incident import CONFIGS, DEFENCES, FAULTS, SHORT, SITUATIONS, STEPS, Switches
from runner.model.observe import LABEL


def cell(case: Case) -> str:
    e = case.effects or {}
    status = "" if e.get("status") is None else f" {e['status']}"
    if case.classification == "bug":
        return f"[red]BUG[/]{status}"
    step = e.get("stopped_at")
    return f"[green]ok[/]{status}" if step is None else f"[green]stop {step}[/]{status}"


def print_table(results: dict[str, list[Receipt]]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"incident model: where each configuration stops each situation ({LABEL})",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("situation", "role", *results):
        table.add_column(col)
    for sit in SITUATIONS:
        cells = [cell(next(r for r in rs if r.probe.id == sit.probe).case(sit.id)) for rs in results.values()]
        table.add_row(f"{sit.probe.removeprefix('model-')}/{sit.id}", sit.role, *cells)
    ui.out.print(table)
    for name, rs in results.items():
        counts = ", ".join(f"{r.probe.id} {r.summary.classifications['clean']}/{len(r.cases)} clean" for r in rs)
        ui.out.print(f"  {name}: {counts}", markup=False)
    ui.out.print("stop N = the path ended at step N: " + ", ".join(f"{k} {v}" for k, v in STEPS.items()), markup=False)
    ui.out.print("configurations: faults-off = both incident faults off; incident = faults on, no defence; +X = the incident "
                 "with one defence (" + ", ".join(f"{v} = {k}" for k, v in SHORT.items()) + "); all = every defence. "
                 "Handoff situations 3-6 inject their own abort, transport or late-write fault.", markup=False)


def cmd_model(args) -> int:
    signers = options.signers(args)
    if args.defence or args.fault_off:
        on = {d: True for d in args.defence or []} | {f: False for f in args.fault_off or []}
        configs = {"custom": Switches(**on)}
    else:
        configs = CONFIGS
    results = {name: observe.run(name, sw) for name, sw in configs.items()}
    out = observe.write(bundle.out_path(args.out, "model"), configs, results, signers)
    print_table(results)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})")
    broken = observe.dropped_guards(results)
    for line in broken:
        ui.err.print(f"diffprobe: guard case dropped or mishandled: {line}", markup=False)
    return errors.DIFFERS if broken else errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "model", "where each defence stops the incident, in a synthetic model",
        about=f"Runs the executable incident model ({LABEL}) under each defence and writes a bundle.",
        example="diffprobe model --defence reject_at_admission", ok="every guard case held in every configuration",
        differs="a guard case was dropped or mishandled (named)")
    options.out(p, "model")
    p.add_argument("--defence", action="append", choices=DEFENCES,
                   help="run one configuration with this defence on (repeatable) instead of the standard set")
    p.add_argument("--fault-off", action="append", choices=FAULTS, help="with --defence: turn this fault off (repeatable)")
    options.signing(p)
    p.set_defaults(func=cmd_model)
