%% @doc PO-log helpers shared by the pure op-based flavor of every type (the Hypermnesia paper, §4.6–4.7,
%% after Baquero, Almeida, Shoker "Pure operation-based replicated data types").
%%
%% A PO-log fragment is a map `#{Dot => Payload}'. Operations are delivered causally, so an
%% entry with dot `D' causally precedes a newly delivered operation with vector timestamp `Ts'
%% iff `Ts' contains `D'; otherwise the two are concurrent. Redundancy relations prune the
%% preceding entries ({@link concurrent/2}); causal stability folds a group of entries once all
%% their dots are stable ({@link all_stable/2}).
-module(hm_polog).

-export([concurrent/2, all_stable/2, put_group/3, reset_groups/2, group_timestamps/1,
         stabilize_groups/3, stabilize_groups/4]).

%% @doc The entries `Ts' has not seen: those concurrent with the operation stamped `Ts'. The
%% others causally precede it, which is what every type's redundancy relation prunes.
-spec concurrent(#{hm_vv:dot() => T}, hm_vv:vv()) -> #{hm_vv:dot() => T}.
concurrent(Entries, Ts) -> maps:filter(fun(D, _) -> not hm_vv:contains(D, Ts) end, Entries).

%% @doc Store a group's live entries in a log keyed by group (an element of a set), dropping
%% the group when none is left.
-spec put_group(K, #{hm_vv:dot() => T}, #{K => #{hm_vv:dot() => T}}) ->
          #{K => #{hm_vv:dot() => T}}.
put_group(K, Live, Log) when map_size(Live) =:= 0 -> maps:remove(K, Log);
put_group(K, Live, Log) -> Log#{K => Live}.

%% @doc Every group's entries that `Ts' has not seen (a map's `{remove, Key}': the reset of a
%% group-keyed log).
-spec reset_groups(hm_vv:vv(), #{K => #{hm_vv:dot() => T}}) -> #{K => #{hm_vv:dot() => T}}.
reset_groups(Ts, Log) ->
    maps:fold(fun(K, Entries, Acc) -> put_group(K, concurrent(Entries, Ts), Acc) end, Log, Log).

%% @doc Causal stability for a group-keyed log: a group whose entries are all stable leaves
%% the log, and joins the timestamp-free set `Seq' iff `Keep(Entries)' (the Hypermnesia paper, §4.7).
-spec stabilize_groups(hm_vv:vv(), {#{K => true}, #{K => map()}}, fun((map()) -> boolean())) ->
          {#{K => true}, #{K => map()}}.
stabilize_groups(V, {Seq, Log}, Keep) ->
    Stable = maps:fold(fun(K, Entries, Acc) ->
                               case all_stable(Entries, V) of
                                   true -> [K | Acc];
                                   false -> Acc
                               end
                       end, [], Log),
    fold_stable(Stable, Seq, Log, Keep, map_size(Log)).

%% The stable groups leave the log and join the set, in bulk (a map built at once and
%% merged costs a fraction of as many single updates: a set of 10,000 elements all
%% becoming stable in one tick).
%% (`All': how many groups the log holds when `Stable' names each at most once, else 0.)
fold_stable([], Seq, Log, _Keep, _All) -> {Seq, Log};
fold_stable(Stable, Seq, Log, Keep, All) ->
    Kept = [K || K <- Stable, Keep(maps:get(K, Log))],
    Log1 = case length(Stable) =:= All of
               true -> #{};
               false -> maps:without(Stable, Log)
           end,
    {maps:merge(Seq, maps:from_keys(Kept, true)), Log1}.

%% @doc {@link stabilize_groups/3} for the groups `Ks' only (those the operations that just
%% became stable named): the cost is theirs, not the log's. When they name half the log's
%% groups or more, the pass over the whole log, which removes them at once, costs less.
-spec stabilize_groups(hm_vv:vv(), [K], {#{K => true}, #{K => map()}}, fun((map()) -> boolean())) ->
          {#{K => true}, #{K => map()}}.
stabilize_groups(V, Ks, {Seq, Log}, Keep) when length(Ks) * 2 >= map_size(Log) ->
    stabilize_groups(V, {Seq, Log}, Keep);
stabilize_groups(V, Ks, {Seq, Log}, Keep) ->
    Stable = lists:foldl(fun(K, Acc) ->
                                 case Log of
                                     #{K := Entries} ->
                                         case all_stable(Entries, V) of
                                             true -> [K | Acc];
                                             false -> Acc
                                         end;
                                     _ -> Acc
                                 end
                         end, [], Ks),
    %% (`Ks' may name a group twice)
    fold_stable(Stable, Seq, Log, Keep, 0).

%% @doc How many timestamps a group-keyed log holds.
-spec group_timestamps(#{term() => map()}) -> non_neg_integer().
group_timestamps(Log) -> maps:fold(fun(_, Entries, N) -> N + map_size(Entries) end, 0, Log).

%% @doc Every entry's dot is in the stable vector `V' (vacuously true for no entries).
-spec all_stable(#{hm_vv:dot() => term()}, hm_vv:vv()) -> boolean().
all_stable(Entries, V) -> all_stable_it(maps:next(maps:iterator(Entries)), V).

all_stable_it(none, _V) -> true;
all_stable_it({D, _, It}, V) -> hm_vv:contains(D, V) andalso all_stable_it(maps:next(It), V).
