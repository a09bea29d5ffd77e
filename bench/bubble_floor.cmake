# bench/bubble_floor: the simulated pipeline bubble (the floor a measurement is held to).
if(TARGET atoll_par)
  add_executable(bubble_floor ${CMAKE_CURRENT_LIST_DIR}/bubble_floor.c)
  target_link_libraries(bubble_floor PRIVATE atoll_par)
endif()
