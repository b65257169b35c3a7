%% @doc The scale table of `make sim-report' (sim/REPORT.md): per replica count, one
%% schedule of the table copies' simulation ({@link hm_sim}), with the messages per client
%% operation, the metadata per key, and the simulated time to converge and to quiesce.
-module(hm_sim_scale).

-export([report/2]).

%% @doc Scale report: per replica count, one schedule: 200 operations over 8 keys in 2 s with a
%% halves partition for the second half, then heal. The table replaces what lies between the
%% `<!-- scale:begin -->' and `<!-- scale:end -->' markers of `File' (the rest of the file is
%% written by hand), or makes up the whole file when it has no markers.
-spec report(file:filename(), [pos_integer()]) -> ok.
report(File, Ns) ->
    Rows = [scale(N) || N <- Ns],
    Table = ["<!-- scale:begin -->\n"
             "Produced by `make sim-report` (hm_sim_scale:report/2, ", otp(), "): for each replica "
             "count, one schedule (seed 1, pawset/lww, ram copies, 200 client operations spread "
             "over 2 s of simulated time on 8 keys from random replicas, network delay 1-50 ms, "
             "no random loss, a halves partition from 1 s until the end of the work phase at "
             "2 s, then heal). Ticks every 250 ms of simulated time.\n\n"
             "| replicas | ops | messages/op (all) | op messages/op | ack messages/op | "
             "meta bytes/key (mean) | meta bytes/key (max) | delivered-vector bytes | "
             "converge after heal (sim ms) | quiescent after heal (sim ms) | checks | run time (s) |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|\n", Rows, notes(),
             "<!-- scale:end -->\n"],
    Text = case file:read_file(File) of
               {ok, Old} ->
                   case binary:split(Old, <<"<!-- scale:begin -->\n">>) of
                       [Pre, Rest] ->
                           [_, Post] = binary:split(Rest, <<"<!-- scale:end -->\n">>),
                           [Pre, Table, Post];
                       _ -> ["# Simulator report\n\n", Table]
                   end;
               _ -> ["# Simulator report\n\n", Table]
           end,
    ok = file:write_file(File, Text),
    io:format("~s", [Table]).

otp() -> "OTP " ++ erlang:system_info(otp_release).

scale(N) ->
    Keys = [list_to_atom("k" ++ integer_to_list(I)) || I <- lists:seq(1, 8)],
    Opts = #{n => N, type => pawset, policy => lww, storage => ram, drop => 0.0, dup => 0.0,
             delay => 50, duration => 2000, ops => 200, faults => 0, keys => Keys},
    {Cfg, Trace0} = hm_sim:gen(1, Opts),
    Nodes = hm_sim:nodes_of(N),
    {A, B} = lists:split(N div 2, Nodes),
    Trace = lists:keysort(1, [{1000, {partition, halves, [A, B]}} | Trace0]),
    T0 = erlang:monotonic_time(millisecond),
    #{ok := Ok, stats := St, failures := Fs} = hm_sim:run(Cfg, Trace),
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    Ops = max(1, maps:get(ops, St, 0)),
    Samples = maps:get(samples, St, []),
    PerKey = [Bt / Ks || {Bt, Ks, _} <- Samples],
    Mean = case PerKey of [] -> 0; _ -> lists:sum(PerKey) / length(PerKey) end,
    Max = lists:max([0 | PerKey]),
    VV = lists:max([0 | [V || {_, _, V} <- Samples]]),
    io_lib:format("| ~p | ~p | ~.1f | ~.1f | ~.1f | ~.1f | ~.1f | ~p | ~p | ~p | ~s | ~.1f |~n",
                  [N, Ops, maps:get(msgs, St, 0) / Ops, maps:get({msg, op}, St, 0) / Ops,
                   maps:get({msg, ack}, St, 0) / Ops, Mean, Max, VV,
                   maps:get(converged_ms, St, -1), maps:get(quiesced_ms, St, -1),
                   case Ok of true -> "pass"; false -> io_lib:format("FAIL ~0P", [Fs, 8]) end,
                   Secs]).

notes() ->
    "\nColumns: messages are every send (op, ack, snapshot request) from the start to "
    "quiescence, divided by client operations. Op messages include retransmissions: every "
    "replica logs every delivered operation until it is stable and, at each tick, resends "
    "(resend_due/2) to every reachable member the ones it has not reported delivered, in "
    "causal order, within a window per member. Acks: every replica to every reachable member every "
    "tick (N^2 per tick). Meta bytes/key: `term_to_binary({hm_meta, Key, KeyState})` summed "
    "over replica n1's metadata rows, divided by the keys it holds, sampled at each of its "
    "ticks during the work phase. The delivered vector (one entry per replica incarnation) "
    "is what every ack and every operation's timestamp carries. Converge: simulated time "
    "from the heal until every replica shows the same rows and delivered vector; quiescent: "
    "until, in addition, logs are empty and no key keeps a timestamp (checked every 250 ms, "
    "so both are multiples of 250).\n".
