# The decode runs of the open GPU targets (issues 20–22), one place for the scripts that measure
# them (issue_targets.sh, step_floor.sh): `target_run_args NAME` prints ding-bench model's
# arguments after `--backend cuda --dtype bf16` for run NAME, and fails for a name it does not know.
# shellcheck shell=bash
target_run_args() {
  case $1 in
    olmoe-b1) echo "--shape olmoe-1b-7b --prompt 256 --new 64" ;;
    olmoe-b8) echo "--shape olmoe-1b-7b --prompt 256 --new 64 --batch 8" ;;
    dsv2-32k) echo "--shape deepseek-v2-lite --prompt 32768 --new 16" ;;
    gdn-1k) echo "--shape qwen3-next-80b-a3b-gdn-12l --prompt 1024 --new 32" ;;
    llama-bf16) echo "--shape llama-3.1-8b --prompt 256 --new 32" ;;
    llama-int8) echo "--shape llama-3.1-8b --prompt 256 --new 32 --quantize int8 --quantize-lm-head" ;;
    llama-fp8) echo "--shape llama-3.1-8b --prompt 256 --new 32 --quantize fp8 --quantize-lm-head" ;;
    *) return 1 ;;
  esac
}
