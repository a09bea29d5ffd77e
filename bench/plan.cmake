# bench/plan_bench: placement of 16,384 GPUs and a full `atoll plan` enumeration
# of a 1T-parameter model on 3,072 GPUs; writes bench/results/plan.md.
add_executable(plan_bench ${CMAKE_CURRENT_LIST_DIR}/plan_bench.c)
target_link_libraries(plan_bench PRIVATE atoll_common)
