# heartbeat: many simulated nodes heartbeating against a real coordinatord.
if(TARGET atoll_common)
  add_executable(bench_heartbeat ${CMAKE_CURRENT_LIST_DIR}/heartbeat.c)
  target_link_libraries(bench_heartbeat PRIVATE atoll_common)
endif()
