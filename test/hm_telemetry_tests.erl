%% @doc Hypermnesia's events as telemetry events (hm_telemetry): names, numeric measurements
%% and metadata per event, emitted through a stand-in for the telemetry library (this module's
%% execute/3), and nothing at all, without failing, when there is no such library.
-module(hm_telemetry_tests).
-include_lib("eunit/include/eunit.hrl").

-export([execute/3]).

%% The stand-in for telemetry:execute/3: it hands the event to the calling process.
execute(Name, Measurements, Metadata) ->
    self() ! {telemetry, Name, Measurements, Metadata},
    ok.

info(Extra) -> maps:merge(#{node => a@h, time => 1}, Extra).

events_map_to_names_measurements_and_metadata_test() ->
    ?assertEqual({[hypermnesia, partition], #{count => 1}, #{node => a@h, peer => b@h}},
                 hm_telemetry:event(partition, info(#{peer => b@h}))),
    ?assertEqual({[hypermnesia, reconnect], #{count => 1, down_ms => 1500},
                  #{node => a@h, peer => b@h}},
                 hm_telemetry:event(reconnect, info(#{peer => b@h, down_ms => 1500}))),
    %% a member never seen down: no down_ms
    ?assertEqual({[hypermnesia, reconnect], #{count => 1}, #{node => a@h, peer => b@h}},
                 hm_telemetry:event(reconnect, info(#{peer => b@h, down_ms => undefined}))),
    ?assertEqual({[hypermnesia, mnesia_rejoin], #{count => 1, peers => 2},
                  #{node => a@h, peers => [b@h, c@h]}},
                 hm_telemetry:event(mnesia_rejoin, info(#{peers => [b@h, c@h]}))),
    ?assertEqual({[hypermnesia, catch_up],
                  #{duration_ms => 40, ops_received => 5, ops_sent => 3,
                    conflicts_resolved => 1},
                  #{node => a@h, peer => b@h, table => t}},
                 hm_telemetry:event(catch_up, info(#{table => t, peer => b@h,
                                                     duration_ms => 40, ops_received => 5,
                                                     ops_sent => 3, conflicts_resolved => 1}))),
    ?assertEqual({[hypermnesia, state_transfer], #{duration_ms => 7, rows => 100},
                  #{node => a@h, table => t}},
                 hm_telemetry:event(state_transfer, info(#{table => t, rows => 100,
                                                           duration_ms => 7}))).

every_event_has_numbers_only_test() ->
    [begin
         {[hypermnesia, E], M, _} = hm_telemetry:event(E, info(#{peer => b@h, peers => [],
                                                                  table => t})),
         ?assert(lists:all(fun is_number/1, maps:values(M)))
     end || E <- hm_events:events()].

emitted_through_the_library_test() ->
    ok = hm_telemetry:emit(?MODULE, partition, info(#{peer => b@h})),
    receive {telemetry, Name, M, Meta} ->
            ?assertEqual({[hypermnesia, partition], #{count => 1}, #{node => a@h, peer => b@h}},
                         {Name, M, Meta})
    after 1000 -> error(not_emitted)
    end.

nothing_without_the_library_test() ->
    ?assertEqual(ok, hm_telemetry:emit(hm_no_such_telemetry, partition, info(#{peer => b@h}))),
    %% a module without execute/3 is no telemetry either
    ?assertEqual(ok, hm_telemetry:emit(lists, partition, info(#{peer => b@h}))),
    receive {telemetry, _, _, _} = Got -> error({emitted, Got}) after 0 -> ok end.
