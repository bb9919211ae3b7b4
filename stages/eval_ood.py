"""DVC stage eval_ood@<run>-<seed>: IID validation and OOD accuracy (Acc@1, Acc@5, per style)."""
import argparse

from nac.pipeline.image import evaluate_image_run
from nac.pipeline.params import load_params, write_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    res = evaluate_image_run(load_params(), args.run, args.seed)
    write_json(f"metrics/image/eval/{args.run}-{args.seed}.json", res)


if __name__ == "__main__":
    main()
