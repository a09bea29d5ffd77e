# bench/sched_place: the event-loop time of one placement at 10,000 nodes.
if(TARGET atoll_coord)
  add_executable(sched_place ${CMAKE_CURRENT_LIST_DIR}/sched_place.c)
  target_link_libraries(sched_place PRIVATE atoll_coord)
endif()
